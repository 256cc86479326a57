package busbar.bench.camel;

import java.io.ByteArrayInputStream;
import java.math.BigInteger;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

import javax.xml.stream.XMLInputFactory;
import javax.xml.stream.XMLStreamConstants;
import javax.xml.stream.XMLStreamException;
import javax.xml.stream.XMLStreamReader;

import com.fasterxml.jackson.core.io.NumberOutput;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * JSON ⇄ XML by busbar's convention (docs/json-xml.md), for the JSON-to-SOAP route. Camel 4
 * has no JSON/XML converter of its own (camel-xmljson is gone, and Jackson's XML module
 * neither writes that convention nor infers types), so this is a small processor:
 * JSON → XML from Jackson's tree, XML → JSON with the JDK's StAX reader.
 */
final class JsonXml {
    static final String SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/";
    static final String SOAP12 = "http://www.w3.org/2003/05/soap-envelope";
    static final String XSI = "http://www.w3.org/2001/XMLSchema-instance";

    /** RFC 8259's number grammar: 007, +1, 1. and " 1" are not numbers. */
    private static final Pattern NUMBER = Pattern.compile("-?(?:0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?");
    private static final int MAX_DEPTH = 64;

    private static final XMLInputFactory XML_IN;

    static {
        XML_IN = XMLInputFactory.newFactory();
        XML_IN.setProperty(XMLInputFactory.SUPPORT_DTD, false);
        XML_IN.setProperty(XMLInputFactory.IS_SUPPORTING_EXTERNAL_ENTITIES, false);
        XML_IN.setProperty(XMLInputFactory.IS_NAMESPACE_AWARE, true);
        XML_IN.setProperty(XMLInputFactory.IS_COALESCING, true);
    }

    private JsonXml() {
    }

    // ---- JSON → XML ------------------------------------------------------------------

    /**
     * The document as the element `root` in the default namespace `namespace`, in a SOAP 1.1
     * envelope. Throws {@link Json.BadRequest} for what XML cannot hold.
     */
    static String toSoap11(JsonNode doc, String root, String namespace) {
        StringBuilder body = new StringBuilder(256);
        String ns = " xmlns=\"" + escape(namespace, true) + "\"";
        boolean[] nil = {false};
        if (doc.isArray()) {
            ObjectNode wrapped = JsonNodeFactory.instance.objectNode();
            wrapped.set("item", doc);
            element(body, root, wrapped, ns, nil);
        } else {
            element(body, root, doc, ns, nil);
        }
        if (nil[0]) {
            // xsi is declared on the root element, right after its name.
            body.insert(1 + root.length(), " xmlns:xsi=\"" + XSI + "\"");
        }
        return "<?xml version=\"1.0\" encoding=\"UTF-8\"?><soapenv:Envelope xmlns:soapenv=\"" + SOAP11
                + "\"><soapenv:Body>" + body + "</soapenv:Body></soapenv:Envelope>";
    }

    private static void element(StringBuilder out, String name, JsonNode v, String ns, boolean[] nil) {
        if (!isName(name)) {
            throw new Json.BadRequest("The JSON cannot be written as XML: the JSON member name '" + name
                    + "' is not an XML name");
        }
        if (v.isArray()) {
            for (JsonNode item : v) {
                if (item.isArray()) {
                    throw new Json.BadRequest("The JSON cannot be written as XML: '" + name
                            + "' holds an array in an array, which XML elements cannot show");
                }
                element(out, name, item, ns, nil);
            }
        } else if (v.isNull()) {
            nil[0] = true;
            out.append('<').append(name).append(ns).append(" xsi:nil=\"true\"/>");
        } else if (v.isObject()) {
            out.append('<').append(name).append(ns);
            String text = null;
            for (Map.Entry<String, JsonNode> m : v.properties()) {
                String k = m.getKey();
                if (k.startsWith("@")) {
                    String attr = k.substring(1);
                    if (!isName(attr) || !m.getValue().isValueNode() || m.getValue().isNull()) {
                        throw new Json.BadRequest("The JSON cannot be written as XML: '" + k
                                + "' is not an attribute XML can hold");
                    }
                    out.append(' ').append(attr).append("=\"").append(escape(scalar(m.getValue()), true))
                            .append('"');
                } else if (k.equals("#text")) {
                    if (!m.getValue().isValueNode() || m.getValue().isNull()) {
                        throw new Json.BadRequest("The JSON cannot be written as XML: '#text' must be a "
                                + "string, number or boolean");
                    }
                    text = scalar(m.getValue());
                }
            }
            out.append('>');
            if (text != null) {
                out.append(escape(text, false));
            }
            for (Map.Entry<String, JsonNode> m : v.properties()) {
                String k = m.getKey();
                if (!k.startsWith("@") && !k.equals("#text")) {
                    element(out, k, m.getValue(), "", nil);
                }
            }
            out.append("</").append(name).append('>');
        } else {
            out.append('<').append(name).append(ns).append('>').append(escape(scalar(v), false))
                    .append("</").append(name).append('>');
        }
    }

    /** A scalar's XML text: numbers in their shortest form (42.80 → 42.8, 1e3 → 1000.0). */
    private static String scalar(JsonNode v) {
        if (v.isTextual()) {
            return v.textValue();
        }
        if (v.isFloatingPointNumber()) {
            return NumberOutput.toString(v.doubleValue(), true);
        }
        return v.asText();
    }

    /** An XML 1.0 name without a colon and not starting with "xml" (in any case). */
    static boolean isName(String name) {
        if (name.isEmpty() || name.regionMatches(true, 0, "xml", 0, 3)) {
            return false;
        }
        for (int i = 0; i < name.length(); i++) {
            char c = name.charAt(i);
            boolean start = Character.isLetter(c) || c == '_';
            boolean ok = start || (i > 0 && (Character.isDigit(c) || c == '-' || c == '.'));
            if (!ok) {
                return false;
            }
        }
        return true;
    }

    private static String escape(String s, boolean attribute) {
        StringBuilder out = null;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            String rep = switch (c) {
                case '<' -> "&lt;";
                case '>' -> "&gt;";
                case '&' -> "&amp;";
                case '\r' -> "&#13;";
                case '"' -> attribute ? "&quot;" : null;
                default -> null;
            };
            if (rep == null && ((c < 0x20 && c != '\t' && c != '\n') || c == 0xFFFE || c == 0xFFFF)) {
                throw new Json.BadRequest("The JSON cannot be written as XML: the character U+"
                        + String.format("%04X", (int) c) + " cannot be written in XML");
            }
            if (rep != null && out == null) {
                out = new StringBuilder(s.length() + 16).append(s, 0, i);
            }
            if (out != null) {
                if (rep != null) {
                    out.append(rep);
                } else {
                    out.append(c);
                }
            }
        }
        return out == null ? s : out.toString();
    }

    // ---- XML → JSON ------------------------------------------------------------------

    /**
     * The content of the first element of a SOAP 1.1 or 1.2 Body (names in `arrays` always
     * arrays, scalars typed). Throws {@link Json.BadGateway} when the answer is not a SOAP
     * envelope.
     */
    static JsonNode fromSoap(byte[] xml, List<String> arrays) {
        try {
            XMLStreamReader r = XML_IN.createXMLStreamReader(new ByteArrayInputStream(xml));
            try {
                if (nextStart(r) < 0 || !r.getLocalName().equals("Envelope")
                        || !(SOAP11.equals(r.getNamespaceURI()) || SOAP12.equals(r.getNamespaceURI()))) {
                    throw new Json.BadGateway("The XML cannot be read as JSON: not a SOAP envelope");
                }
                String soapNs = r.getNamespaceURI();
                while (nextStart(r) >= 0) {
                    if (r.getLocalName().equals("Body") && soapNs.equals(r.getNamespaceURI())) {
                        if (nextStart(r) < 0) {
                            break;
                        }
                        return value(r, arrays, 1);
                    }
                    skip(r);
                }
                throw new Json.BadGateway("The XML cannot be read as JSON: the SOAP Body is empty or missing");
            } finally {
                r.close();
            }
        } catch (XMLStreamException e) {
            throw new Json.BadGateway("The XML cannot be read as JSON: " + e.getMessage());
        }
    }

    /** Moves to the next start tag among the current element's children; -1 at its end tag. */
    private static int nextStart(XMLStreamReader r) throws XMLStreamException {
        while (r.hasNext()) {
            int ev = r.next();
            if (ev == XMLStreamConstants.START_ELEMENT) {
                return ev;
            }
            if (ev == XMLStreamConstants.END_ELEMENT) {
                return -1;
            }
            if (ev == XMLStreamConstants.DTD) {
                throw new XMLStreamException("a DOCTYPE is refused");
            }
        }
        return -1;
    }

    private static void skip(XMLStreamReader r) throws XMLStreamException {
        int depth = 1;
        while (depth > 0) {
            int ev = r.next();
            if (ev == XMLStreamConstants.START_ELEMENT) {
                depth++;
            } else if (ev == XMLStreamConstants.END_ELEMENT) {
                depth--;
            }
        }
    }

    /** The value of the element the reader is on; the reader ends on its end tag. */
    private static JsonNode value(XMLStreamReader r, List<String> arrays, int depth) throws XMLStreamException {
        if (depth > MAX_DEPTH) {
            throw new XMLStreamException("deeper than " + MAX_DEPTH + " elements");
        }
        JsonNodeFactory f = JsonNodeFactory.instance;
        boolean nil = false;
        ObjectNode obj = null;
        for (int i = 0; i < r.getAttributeCount(); i++) {
            if (XSI.equals(r.getAttributeNamespace(i))) {
                nil |= r.getAttributeLocalName(i).equals("nil") && r.getAttributeValue(i).equals("true");
                continue;
            }
            if (obj == null) {
                obj = f.objectNode();
            }
            obj.set("@" + r.getAttributeLocalName(i), scalar(r.getAttributeValue(i)));
        }
        StringBuilder text = new StringBuilder();
        int textAt = obj == null ? 0 : obj.size();
        while (true) {
            int ev = r.next();
            if (ev == XMLStreamConstants.END_ELEMENT) {
                break;
            }
            switch (ev) {
                case XMLStreamConstants.CHARACTERS, XMLStreamConstants.CDATA, XMLStreamConstants.SPACE ->
                    text.append(r.getText());
                case XMLStreamConstants.START_ELEMENT -> {
                    if (obj == null) {
                        obj = f.objectNode();
                    }
                    String name = r.getLocalName();
                    JsonNode v = value(r, arrays, depth + 1);
                    JsonNode had = obj.get(name);
                    if (had == null) {
                        obj.set(name, arrays.contains(name) ? f.arrayNode().add(v) : v);
                    } else if (had.isArray()) {
                        ((ArrayNode) had).add(v);
                    } else {
                        obj.set(name, f.arrayNode().add(had).add(v));
                    }
                }
                case XMLStreamConstants.DTD -> throw new XMLStreamException("a DOCTYPE is refused");
                default -> {
                }
            }
        }
        if (nil) {
            return f.nullNode();
        }
        if (obj == null) {
            return scalar(text.toString());
        }
        if (!text.toString().isBlank()) {
            // "#text" goes after the attributes, before the child elements.
            ObjectNode ordered = f.objectNode();
            int i = 0;
            for (Map.Entry<String, JsonNode> m : obj.properties()) {
                if (i++ == textAt) {
                    ordered.set("#text", scalar(text.toString()));
                }
                ordered.set(m.getKey(), m.getValue());
            }
            if (i == textAt) {
                ordered.set("#text", scalar(text.toString()));
            }
            return ordered;
        }
        return obj;
    }

    /** Text typed: true/false, an RFC 8259 number, else a string. */
    private static JsonNode scalar(String t) {
        JsonNodeFactory f = JsonNodeFactory.instance;
        if (t.equals("true") || t.equals("false")) {
            return f.booleanNode(t.equals("true"));
        }
        var m = NUMBER.matcher(t);
        if (m.matches()) {
            if (m.group(1) == null && m.group(2) == null) {
                BigInteger n = new BigInteger(t);
                if (n.bitLength() < 64) {
                    return f.numberNode(n.longValue());
                }
                if (n.signum() > 0 && n.bitLength() == 64) {
                    return f.numberNode(n);
                }
            }
            return f.numberNode(Double.parseDouble(t));
        }
        return f.textNode(t);
    }
}
