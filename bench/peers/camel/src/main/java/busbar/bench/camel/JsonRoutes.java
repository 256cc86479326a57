package busbar.bench.camel;

import java.nio.charset.StandardCharsets;
import java.util.List;

import com.jayway.jsonpath.InvalidJsonException;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;

import org.apache.camel.AggregationStrategy;
import org.apache.camel.Exchange;
import org.apache.camel.LoggingLevel;
import org.apache.camel.Message;
import org.apache.camel.builder.RouteBuilder;
import org.apache.camel.component.jackson.JacksonDataFormat;
import org.apache.camel.component.netty.http.NettyHttpMessage;

/**
 * The JSON/REST integrator scenarios of examples/integrator.yaml (docs/integrator.md) as Camel
 * routes, on busbar's URL paths, so one load script can drive either: JSONPath routing
 * (camel-jsonpath), Jolt mappings (camel-jolt) with a Java step for what Jolt cannot compute,
 * a parallel multicast for scatter-gather, and JSON ⇄ SOAP through a Java step (JsonXml).
 */
final class JsonRoutes extends RouteBuilder {
    static final String PRICES = "busbarGoogPrices";
    static final String PRODUCT_ID = "busbarProductId";
    private static final String PARTS = "busbarParts";
    private static final String GOOG_PRICES = "$..[?(@.symbol == 'GOOG')].price";
    private static final String[] BRANCHES = {"stock", "price", "reviews"};

    /** Where each scenario's back end is, and how the client and listener are set up. */
    record Settings(String host, int port, String standard, String premium, String soap, String stock,
            String price, String reviews, int pool, int maxBody) {
    }

    private final Settings s;

    JsonRoutes(Settings s) {
        this.s = s;
    }

    private String listen(String path, String method, boolean prefix) {
        return "netty-http:http://" + s.host() + ":" + s.port() + path + "?httpMethodRestrict=" + method
                + "&chunkedMaxContentLength=" + s.maxBody() + (prefix ? "&matchOnUriPrefix=true" : "")
                // bridgeEndpoint on a listener: a body sent as a form (curl's default Content-Type)
                // is not parsed into headers; netty-http closes the connection on one that is
                // not a valid form otherwise.
                + "&bridgeEndpoint=true";
    }

    /**
     * A pooled keep-alive client for one back end, like the SOAP routes' (CamelPeer). The
     * timeouts are busbar's endpoint timeouts in examples/integrator.yaml.
     */
    private String client(String url, int timeoutMs) {
        return "netty-http:" + url + "?bridgeEndpoint=true&throwExceptionOnFailure=false"
                + "&keepAlive=true&producerPoolEnabled=true&producerPoolMaxTotal=" + s.pool()
                + "&producerPoolMaxIdle=" + s.pool() + "&chunkedMaxContentLength=" + s.maxBody()
                + "&connectTimeout=2000&requestTimeout=" + timeoutMs;
    }

    @Override
    public void configure() {
        JacksonDataFormat json = new JacksonDataFormat(Json.MAPPER, Object.class);
        String standard = client(s.standard(), 30000);
        String premium = client(s.premium(), 30000);
        String soap = client(s.soap(), 30000);

        // A body that is not JSON, or not the document a mapping expects, is the client's
        // fault (400); anything else is the back end's (502). Answers are problem documents.
        onException(InvalidJsonException.class, JsonProcessingException.class).handled(true)
                .process(Json.fromException(400, "Malformed JSON"));
        onException(Json.BadRequest.class).handled(true)
                .process(Json.fromException(400, null));
        onException(NotFound.class).handled(true)
                .process(e -> Json.answer(e, 404, "No such path"));
        onException(Exception.class).handled(true)
                .log(LoggingLevel.WARN, "busbar.bench.camel", "${routeId}: ${exception}")
                .process(Json.fromException(502, "Back end call failed"));

        // Forwarded unchanged: only the Content-Type goes along.
        from(listen("/api/passthrough", "POST", false)).routeId("JsonPassthrough")
                .removeHeaders("*", Exchange.CONTENT_TYPE)
                .to(standard);

        // The tier is read with JSONPath over the whole document (stream caching lets the
        // same body be forwarded after it). No customerTier member at the top: 400, as busbar.
        from(listen("/api/route", "POST", false)).routeId("JsonCBR")
                .setProperty("tier").jsonpath("$.customerTier", true)
                .removeHeaders("*", Exchange.CONTENT_TYPE)
                .choice()
                    .when(exchangeProperty("tier").isNull())
                        .process(e -> Json.answer(e, 400, "JSON field $.customerTier is missing"))
                    .when(exchangeProperty("tier").isEqualTo("premium"))
                        .to(premium)
                    .otherwise()
                        .to(standard);

        // The first GOOG price when it is the number 42.8, else the list of GOOG prices.
        from(listen("/api/route/filter", "POST", false)).routeId("JsonCBRFilter")
                .setProperty(PRICES).jsonpath(GOOG_PRICES, List.class)
                .removeHeaders("*")
                .choice()
                    .when(Mappings::firstIs428)
                        .setBody(e -> e.getProperty(PRICES, List.class).get(0))
                    .otherwise()
                        .setBody(exchangeProperty(PRICES))
                .end()
                .marshal(json)
                .setHeader(Exchange.CONTENT_TYPE, constant(Json.CONTENT_TYPE))
                .to(standard);

        // Jolt moves and renames; Mappings computes what Jolt's functions cannot.
        from(listen("/api/map", "POST", false)).routeId("JsonMap")
                .unmarshal(json)
                .to("jolt:classpath:jolt/map.json?inputType=Hydrated&outputType=Hydrated&contentCache=true")
                .process(Mappings::finishMap)
                .marshal(json)
                .removeHeaders("*")
                .setHeader(Exchange.CONTENT_TYPE, constant(Json.CONTENT_TYPE))
                .to(standard);

        from(listen("/api/transform", "POST", false)).routeId("JsonTransform")
                .unmarshal(json)
                .to("jolt:classpath:jolt/transform.json?inputType=Hydrated&outputType=Hydrated&contentCache=true")
                .process(Mappings::finishTransform)
                .marshal(json)
                .removeHeaders("*")
                .setHeader(Exchange.CONTENT_TYPE, constant(Json.CONTENT_TYPE))
                .to(standard);

        // The three product services in parallel; their JSON answers are combined by name.
        from(listen("/api/product", "GET", true)).routeId("ScatterGather")
                .process(JsonRoutes::productId)
                .removeHeaders("*")
                .setBody(constant((Object) null))
                .multicast(new ByName()).parallelProcessing()
                    .to("direct:stock", "direct:price", "direct:reviews")
                .end()
                .process(JsonRoutes::gathered);
        String[] bases = {s.stock(), s.price(), s.reviews()};
        for (int i = 0; i < BRANCHES.length; i++) {
            String name = BRANCHES[i];
            from("direct:" + name).routeId("ScatterGather-" + name)
                    .setHeader(Exchange.HTTP_METHOD, constant("GET"))
                    .setHeader(Exchange.HTTP_PATH, simple("/" + name + "/${exchangeProperty." + PRODUCT_ID + "}"))
                    .to(client(bases[i], 5000));
        }

        // JSON → SOAP 1.1 buyStocks call → the Body's content back as JSON (docs/json-xml.md).
        from(listen("/api/soap", "POST", false)).routeId("JsonToSoap")
                .process(e -> {
                    JsonNode doc = Json.MAPPER.readTree(e.getMessage().getBody(byte[].class));
                    Message m = e.getMessage();
                    m.getHeaders().clear();
                    m.setHeader(Exchange.CONTENT_TYPE, "text/xml; charset=UTF-8");
                    m.setBody(JsonXml.toSoap11(doc, "buyStocks", "http://services.samples")
                            .getBytes(StandardCharsets.UTF_8));
                })
                .to(soap)
                .process(e -> {
                    Message m = e.getMessage();
                    JsonNode doc = JsonXml.fromSoap(m.getBody(byte[].class), List.of("order"));
                    // The back end's status and headers stay; the body is now JSON.
                    m.removeHeader(Exchange.CONTENT_LENGTH);
                    m.setHeader(Exchange.CONTENT_TYPE, Json.CONTENT_TYPE);
                    m.setBody(Json.MAPPER.writeValueAsBytes(doc));
                });
    }

    /** The {id} of /api/product/{id}: one path segment, kept percent-encoded for the calls. */
    private static void productId(Exchange e) {
        // The request line's path as sent: netty-http's CamelHttpUri header is percent-decoded.
        String path = e.getMessage(NettyHttpMessage.class).getHttpRequest().uri();
        int q = path.indexOf('?');
        if (q >= 0) {
            path = path.substring(0, q);
        }
        String prefix = "/api/product/";
        String id = path.startsWith(prefix) ? path.substring(prefix.length()) : "";
        if (id.isEmpty() || id.contains("/")) {
            throw new NotFound();
        }
        e.setProperty(PRODUCT_ID, id);
    }

    private static final class NotFound extends RuntimeException {
        private static final long serialVersionUID = 1L;

        NotFound() {
            super("not found", null, false, false);
        }
    }

    /** Keeps each branch's answer (or why it failed) by its multicast index. */
    private static final class ByName implements AggregationStrategy {
        @Override
        public Exchange aggregate(Exchange old, Exchange branch) {
            Exchange result = old == null ? branch : old;
            Object[] parts = result.getProperty(PARTS, Object[].class);
            if (parts == null) {
                parts = new Object[BRANCHES.length];
                result.setProperty(PARTS, parts);
            }
            int i = branch.getProperty(Exchange.MULTICAST_INDEX, Integer.class);
            // A failed call arrives handled (the route's onException made it a 502), the
            // exception kept as the caught one.
            Exception failed = branch.getException() != null ? branch.getException()
                    : branch.getProperty(Exchange.EXCEPTION_CAUGHT, Exception.class);
            Integer status = branch.getMessage().getHeader(Exchange.HTTP_RESPONSE_CODE, Integer.class);
            if (failed != null) {
                parts[i] = "its call failed: " + failed.getMessage();
                branch.setException(null);
            } else if (status == null || status < 200 || status > 299) {
                parts[i] = "the back end answered " + status;
            } else {
                try {
                    parts[i] = Json.MAPPER.readTree(branch.getMessage().getBody(byte[].class));
                } catch (Exception e) {
                    parts[i] = "its answer is not JSON: " + e.getMessage();
                }
            }
            return result;
        }
    }

    /** {"stock": …, "price": …, "reviews": …}, or 502 naming the first branch that failed. */
    private static void gathered(Exchange e) throws JsonProcessingException {
        Object[] parts = e.getProperty(PARTS, Object[].class);
        var doc = Json.MAPPER.createObjectNode();
        for (int i = 0; i < BRANCHES.length; i++) {
            Object p = parts == null ? "it did not answer" : parts[i];
            if (!(p instanceof JsonNode node)) {
                Json.answer(e, 502, "Branch '" + BRANCHES[i] + "' failed: " + (p == null ? "no answer" : p));
                return;
            }
            doc.set(BRANCHES[i], node);
        }
        Message m = e.getMessage();
        m.getHeaders().clear();
        m.setHeader(Exchange.HTTP_RESPONSE_CODE, 200);
        m.setHeader(Exchange.CONTENT_TYPE, Json.CONTENT_TYPE);
        m.setBody(Json.MAPPER.writeValueAsBytes(doc));
    }
}
