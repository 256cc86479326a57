package busbar.bench.camel;

import java.nio.charset.StandardCharsets;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.core.StreamWriteFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;

import org.apache.camel.Exchange;
import org.apache.camel.Message;
import org.apache.camel.Processor;

/** The one Jackson mapper of the JSON routes, and their error answers. */
final class Json {
    /*
     * Doubles are written in their shortest round-trip form (Jackson's Schubfach writer), as
     * busbar writes them: 13.10 comes back as 13.1 and 1e2 as 100.0. Java 17's own
     * Double.toString sometimes prints a digit more than needed.
     */
    static final ObjectMapper MAPPER = JsonMapper.builder(JsonFactory.builder()
                    .enable(StreamWriteFeature.USE_FAST_DOUBLE_WRITER)
                    .enable(StreamReadFeature.USE_FAST_DOUBLE_PARSER)
                    .build())
            .build();

    static final String CONTENT_TYPE = "application/json";

    private Json() {
    }

    /** A request the route cannot read: answered 400. */
    static final class BadRequest extends RuntimeException {
        private static final long serialVersionUID = 1L;

        BadRequest(String message) {
            super(message, null, false, false);
        }
    }

    /** A back-end answer the route cannot use: answered 502. */
    static final class BadGateway extends RuntimeException {
        private static final long serialVersionUID = 1L;

        BadGateway(String message) {
            super(message, null, false, false);
        }
    }

    /** An RFC 9457 problem document, the shape busbar answers its errors with. */
    static byte[] problem(int status, String title) {
        var doc = MAPPER.createObjectNode();
        doc.put("type", "about:blank");
        doc.put("title", title);
        doc.put("status", status);
        return doc.toString().getBytes(StandardCharsets.UTF_8);
    }

    static void answer(Exchange exchange, int status, String title) {
        Message m = exchange.getMessage();
        m.getHeaders().clear();
        m.setHeader(Exchange.HTTP_RESPONSE_CODE, status);
        m.setHeader(Exchange.CONTENT_TYPE, "application/problem+json");
        m.setBody(problem(status, title));
    }

    /** Answers `status` with a problem document titled `prefix: ` and the exception's message. */
    static Processor fromException(int status, String prefix) {
        return exchange -> {
            Exception e = exchange.getProperty(Exchange.EXCEPTION_CAUGHT, Exception.class);
            String detail = e instanceof JsonProcessingException j ? j.getOriginalMessage()
                    : e == null ? null : e.getMessage();
            detail = detail == null ? "" : detail;
            int nl = detail.indexOf('\n');
            if (nl >= 0) {
                detail = detail.substring(0, nl);
            }
            answer(exchange, status, prefix == null ? detail : detail.isEmpty() ? prefix : prefix + ": " + detail);
        };
    }
}
