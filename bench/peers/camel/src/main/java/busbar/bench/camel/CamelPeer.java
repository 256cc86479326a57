package busbar.bench.camel;

import java.nio.file.Files;
import java.nio.file.Path;

import java.nio.charset.StandardCharsets;

import org.apache.camel.Exchange;
import org.apache.camel.LoggingLevel;
import org.apache.camel.Message;
import org.apache.camel.Processor;
import org.apache.camel.builder.RouteBuilder;
import org.apache.camel.main.Main;
import org.apache.camel.support.builder.Namespaces;

/**
 * The ESB proxies of busbar's classic benchmark scenarios (docs/scenarios.md: DirectProxy, the
 * three CBRs, XSLTProxy, and SecureProxy's legacy WS-Security profile with WSS4J) as Camel
 * routes, so busbar and Camel can be measured against the same echo back end in one run;
 * and the JSON/REST integrator scenarios of examples/integrator.yaml on its paths (JsonRoutes).
 *
 * Settings (system property, else environment variable, else default):
 *   camel.port / CAMEL_PORT          listen port on 127.0.0.1 (8290)
 *   camel.host / CAMEL_HOST          listen address (127.0.0.1)
 *   camel.echo / CAMEL_ECHO          back end URL (http://127.0.0.1:9000/service/EchoService)
 *   camel.xslt.request / CAMEL_XSLT_REQUEST    request stylesheet (XSLTProxy)
 *   camel.xslt.response / CAMEL_XSLT_RESPONSE  response stylesheet (XSLTProxy)
 *   camel.pool / CAMEL_POOL          back-end connection pool size (512)
 *   camel.max.body / CAMEL_MAX_BODY  largest request/response body in bytes (64 MiB)
 *   camel.keys / CAMEL_KEYS          key directory of SecureProxy (tests/interop/keys.sh's
 *                                    layout: server.p12, ca.pem; target/keys); without it,
 *                                    SecureProxy is not served
 *   camel.keys.password / CAMEL_KEYS_PASSWORD  server.p12's password (server-pass)
 *
 * The JSON/REST integrator scenarios (JsonRoutes, on busbar's /api/... paths):
 *   camel.json.standard / CAMEL_JSON_STANDARD  standard back end (http://127.0.0.1:9010/echo)
 *   camel.json.premium / CAMEL_JSON_PREMIUM    premium back end (http://127.0.0.1:9011/echo)
 *   camel.json.soap / CAMEL_JSON_SOAP          SOAP back end of /api/soap (the standard one)
 *   camel.json.stock / CAMEL_JSON_STOCK        product services of /api/product/{id}
 *   camel.json.price / CAMEL_JSON_PRICE          (http://127.0.0.1:9012, :9013, :9014)
 *   camel.json.reviews / CAMEL_JSON_REVIEWS
 */
public final class CamelPeer {
    static final String ROUTING_VALUE = "xadmin;server1;community#1.0##";
    static final String SOAPENV = "http://schemas.xmlsoap.org/soap/envelope/";

    /* Only the headers the benchmark's requests carry go to the back end: the incoming Host and
       Content-Length, and Camel's own routing headers, must not leak into the call. */
    static final String[] KEPT_HEADERS = {"Content-Type", "SOAPAction", "routing"};

    private CamelPeer() {
    }

    static String setting(String property, String env, String fallback) {
        String v = System.getProperty(property);
        if (v == null || v.isEmpty()) {
            v = System.getenv(env);
        }
        return v == null || v.isEmpty() ? fallback : v;
    }

    /** The SOAP 1.1 fault the benchmark expects, byte for byte. */
    static String fault(String reason) {
        return "<soapenv:Envelope xmlns:soapenv=\"" + SOAPENV + "\"><soapenv:Body><soapenv:Fault>"
                + "<faultcode>soapenv:Server</faultcode><faultstring>" + reason + "</faultstring>"
                + "</soapenv:Fault></soapenv:Body></soapenv:Envelope>";
    }

    public static void main(String[] args) throws Exception {
        String host = setting("camel.host", "CAMEL_HOST", "127.0.0.1");
        int port = Integer.parseInt(setting("camel.port", "CAMEL_PORT", "8290"));
        String echo = setting("camel.echo", "CAMEL_ECHO", "http://127.0.0.1:9000/service/EchoService");
        String xslRequest = setting("camel.xslt.request", "CAMEL_XSLT_REQUEST", "examples/xslt/reverse-request.xsl");
        String xslResponse = setting("camel.xslt.response", "CAMEL_XSLT_RESPONSE", "examples/xslt/reverse-response.xsl");
        int pool = Integer.parseInt(setting("camel.pool", "CAMEL_POOL", "512"));
        // Netty's aggregator refuses bodies above 1 MiB by default (413); the benchmark's stress
        // sizes go beyond that.
        int maxBody = Integer.parseInt(setting("camel.max.body", "CAMEL_MAX_BODY", "67108864"));
        for (String xsl : new String[] {xslRequest, xslResponse}) {
            if (!Files.isReadable(Path.of(xsl))) {
                throw new IllegalArgumentException("stylesheet not readable: " + xsl);
            }
        }

        String standard = setting("camel.json.standard", "CAMEL_JSON_STANDARD", "http://127.0.0.1:9010/echo");
        JsonRoutes.Settings json = new JsonRoutes.Settings(host, port, standard,
                setting("camel.json.premium", "CAMEL_JSON_PREMIUM", "http://127.0.0.1:9011/echo"),
                setting("camel.json.soap", "CAMEL_JSON_SOAP", standard),
                setting("camel.json.stock", "CAMEL_JSON_STOCK", "http://127.0.0.1:9012"),
                setting("camel.json.price", "CAMEL_JSON_PRICE", "http://127.0.0.1:9013"),
                setting("camel.json.reviews", "CAMEL_JSON_REVIEWS", "http://127.0.0.1:9014"),
                pool, maxBody);

        Path keys = Path.of(setting("camel.keys", "CAMEL_KEYS", "target/keys")).toAbsolutePath();
        SecureProxy secure = null;
        if (Files.isReadable(keys.resolve("server.p12")) && Files.isReadable(keys.resolve("ca.pem"))) {
            secure = new SecureProxy(keys, setting("camel.keys.password", "CAMEL_KEYS_PASSWORD", "server-pass"));
        } else {
            System.out.println("camel-peer: no server.p12 and ca.pem in " + keys + ": SecureProxy is not served"
                    + " (tests/interop/keys.sh " + keys + " makes them)");
        }

        Main main = new Main();
        // The CBR routes read the body with XPath and then forward it: the Netty stream must be
        // replayable. (On by default in Camel 4; stated so the benchmark config is explicit.)
        main.configure().withStreamCachingEnabled(true);
        main.configure().addRoutesBuilder(new Routes(host, port, echo,
                Path.of(xslRequest).toAbsolutePath().toString(),
                Path.of(xslResponse).toAbsolutePath().toString(), pool, maxBody, secure));
        main.configure().addRoutesBuilder(new JsonRoutes(json));
        System.out.println("camel-peer: pid " + ProcessHandle.current().pid() + " listening on http://"
                + host + ":" + port + "/service/ -> " + echo + ", /api/ -> " + json.standard() + " (premium "
                + json.premium() + ", soap " + json.soap() + ", products " + json.stock() + " " + json.price() + " "
                + json.reviews() + ")" + (secure != null ? ", SecureProxy keys " + keys : ""));
        main.run(args);
    }

    static final class Routes extends RouteBuilder {
        private final String host;
        private final int port;
        private final String echo;
        private final String xslRequest;
        private final String xslResponse;
        private final int pool;
        private final int maxBody;
        private final SecureProxy secure;

        Routes(String host, int port, String echo, String xslRequest, String xslResponse, int pool,
                int maxBody, SecureProxy secure) {
            this.host = host;
            this.port = port;
            this.echo = echo;
            this.xslRequest = xslRequest;
            this.xslResponse = xslResponse;
            this.pool = pool;
            this.maxBody = maxBody;
            this.secure = secure;
        }

        /** Answers HTTP 500 with the benchmark's SOAP fault; no request header is echoed back. */
        private static Processor faultReply(String reason) {
            byte[] body = fault(reason).getBytes(StandardCharsets.UTF_8);
            return exchange -> {
                Message m = exchange.getMessage();
                m.getHeaders().clear();
                m.setHeader(Exchange.HTTP_RESPONSE_CODE, 500);
                m.setHeader(Exchange.CONTENT_TYPE, "text/xml; charset=UTF-8");
                m.setBody(body);
            };
        }

        private String listen(String name) {
            return "netty-http:http://" + host + ":" + port + "/service/" + name
                    + "?chunkedMaxContentLength=" + maxBody;
        }

        @Override
        public void configure() {
            // The same keep-alive client settings for every route (each route's producer keeps
            // its own pool of up to `pool` connections). bridgeEndpoint: call the echo URL as
            // given, not the incoming path; throwExceptionOnFailure=false: pass the back end's
            // status through instead of turning it into an exception. maxIdle = maxTotal, or
            // connections above the default idle cap of 100 are closed after every call.
            String backEnd = "netty-http:" + echo + "?bridgeEndpoint=true&throwExceptionOnFailure=false"
                    + "&keepAlive=true&producerPoolEnabled=true&producerPoolMaxTotal=" + pool
                    + "&producerPoolMaxIdle=" + pool + "&chunkedMaxContentLength=" + maxBody;

            // A back-end failure is an HTTP 500 with a SOAP fault, never a retry.
            onException(Exception.class).handled(true)
                    .log(LoggingLevel.WARN, "busbar.bench.camel", "${routeId}: ${exception}")
                    .process(faultReply("Back end call failed"));

            Namespaces ns = new Namespaces("soapenv", SOAPENV).add("r", "http://someuri");

            from(listen("DirectProxy")).routeId("DirectProxy")
                    .removeHeaders("*", KEPT_HEADERS).to(backEnd);

            from(listen("CBRProxy")).routeId("CBRProxy")
                    .choice()
                        .when().xpath("//order[1]/symbol = 'IBM'")
                            .removeHeaders("*", KEPT_HEADERS).to(backEnd)
                        .otherwise()
                            .process(faultReply("First order must be for the symbol IBM"));

            from(listen("CBRSOAPHeaderProxy")).routeId("CBRSOAPHeaderProxy")
                    .choice()
                        .when().xpath("/soapenv:Envelope/soapenv:Header/r:routing = '" + ROUTING_VALUE + "'", ns)
                            .removeHeaders("*", KEPT_HEADERS).to(backEnd)
                        .otherwise()
                            .process(faultReply("Invalid routing header"));

            // The body is never parsed: the decision is on the HTTP header alone.
            from(listen("CBRTransportHeaderProxy")).routeId("CBRTransportHeaderProxy")
                    .choice()
                        .when(header("routing").isEqualTo(ROUTING_VALUE))
                            .removeHeaders("*", KEPT_HEADERS).to(backEnd)
                        .otherwise()
                            .process(faultReply("Invalid routing header"));

            // Templates are compiled once and cached (contentCache is the default; stated).
            from(listen("XSLTProxy")).routeId("XSLTProxy")
                    .to("xslt-saxon:file:" + xslRequest + "?contentCache=true&output=bytes")
                    .removeHeaders("*", KEPT_HEADERS)
                    .setHeader(Exchange.CONTENT_TYPE, constant("text/xml; charset=UTF-8"))
                    .to(backEnd)
                    .to("xslt-saxon:file:" + xslResponse + "?contentCache=true&output=bytes")
                    .removeHeaders("*")
                    .setHeader(Exchange.CONTENT_TYPE, constant("text/xml; charset=UTF-8"));

            // WS-Security, legacy profile (SecureProxy.java): the request verified and
            // decrypted with WSS4J, forwarded plain, the answer timestamped, signed and
            // encrypted for the request's signer. A refused request is an HTTP 500 with the
            // wsse fault code and nothing is forwarded.
            if (secure != null) {
                from(listen("SecureProxy")).routeId("SecureProxy")
                        .onException(SecureProxy.Fault.class).handled(true)
                            .log(LoggingLevel.WARN, "busbar.bench.camel", "SecureProxy refused a request: ${exception.message}")
                            .process(SecureProxy::faultReply)
                        .end()
                        .process(secure::verifyRequest)
                        .removeHeaders("*", KEPT_HEADERS)
                        .to(backEnd)
                        .process(secure::secureResponse);
            }
        }
    }
}
