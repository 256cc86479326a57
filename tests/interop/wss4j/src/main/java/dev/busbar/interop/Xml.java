package dev.busbar.interop;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;

import javax.xml.XMLConstants;
import javax.xml.parsers.DocumentBuilder;
import javax.xml.parsers.DocumentBuilderFactory;
import javax.xml.parsers.ParserConfigurationException;
import javax.xml.transform.OutputKeys;
import javax.xml.transform.Transformer;
import javax.xml.transform.TransformerException;
import javax.xml.transform.TransformerFactory;
import javax.xml.transform.dom.DOMSource;
import javax.xml.transform.stream.StreamResult;

import org.w3c.dom.Attr;
import org.w3c.dom.Document;
import org.w3c.dom.Element;
import org.w3c.dom.NamedNodeMap;
import org.w3c.dom.Node;
import org.xml.sax.SAXException;

/** Parsing and writing SOAP envelopes without DTDs, entities or an XML declaration. */
final class Xml {
    static final String SOAP11_NS = "http://schemas.xmlsoap.org/soap/envelope/";
    static final String SOAP12_NS = "http://www.w3.org/2003/05/soap-envelope";

    private Xml() {}

    static Document parse(byte[] bytes) throws IOException {
        try {
            DocumentBuilderFactory f = DocumentBuilderFactory.newInstance();
            f.setNamespaceAware(true);
            f.setFeature(XMLConstants.FEATURE_SECURE_PROCESSING, true);
            f.setFeature("http://apache.org/xml/features/disallow-doctype-decl", true);
            f.setExpandEntityReferences(false);
            DocumentBuilder b = f.newDocumentBuilder();
            b.setErrorHandler(null);
            return b.parse(new ByteArrayInputStream(bytes));
        } catch (ParserConfigurationException | SAXException e) {
            throw new IOException("not well-formed XML: " + e.getMessage(), e);
        }
    }

    static byte[] write(Node node) throws IOException {
        try {
            Transformer t = TransformerFactory.newInstance().newTransformer();
            t.setOutputProperty(OutputKeys.OMIT_XML_DECLARATION, "yes");
            t.setOutputProperty(OutputKeys.ENCODING, "UTF-8");
            t.setOutputProperty(OutputKeys.INDENT, "no");
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            t.transform(new DOMSource(node), new StreamResult(out));
            return out.toByteArray();
        } catch (TransformerException e) {
            throw new IOException("cannot serialise: " + e.getMessage(), e);
        }
    }

    static String writeString(Node node) throws IOException {
        return new String(write(node), StandardCharsets.UTF_8);
    }

    /** "11" or "12" from the envelope's namespace. */
    static String soapVersion(Document doc) throws IOException {
        Element env = doc.getDocumentElement();
        if (!"Envelope".equals(env.getLocalName())) {
            throw new IOException("document element is not a SOAP Envelope");
        }
        if (SOAP11_NS.equals(env.getNamespaceURI())) {
            return "11";
        }
        if (SOAP12_NS.equals(env.getNamespaceURI())) {
            return "12";
        }
        throw new IOException("unknown SOAP envelope namespace " + env.getNamespaceURI());
    }

    /**
     * Moves Envelope, Header and Body to the other SOAP version's namespace and rewrites
     * the declarations of that namespace. Only meant for plain test payloads (no
     * SOAP-namespaced attributes or faults).
     */
    static Document convertSoap(Document doc, String version) throws IOException {
        String from = SOAP11_NS.equals(doc.getDocumentElement().getNamespaceURI()) ? SOAP11_NS : SOAP12_NS;
        String to = "12".equals(version) ? SOAP12_NS : SOAP11_NS;
        if (from.equals(to)) {
            return doc;
        }
        rename(doc, doc.getDocumentElement(), from, to);
        return doc;
    }

    private static void rename(Document doc, Element el, String from, String to) {
        NamedNodeMap attrs = el.getAttributes();
        for (int i = 0; i < attrs.getLength(); i++) {
            Attr a = (Attr) attrs.item(i);
            if (XMLConstants.XMLNS_ATTRIBUTE_NS_URI.equals(a.getNamespaceURI()) && from.equals(a.getValue())) {
                a.setValue(to);
            }
        }
        Element current = el;
        if (from.equals(el.getNamespaceURI())) {
            current = (Element) doc.renameNode(el, to, el.getNodeName());
        }
        for (Node c = current.getFirstChild(); c != null; c = c.getNextSibling()) {
            if (c instanceof Element) {
                rename(doc, (Element) c, from, to);
            }
        }
    }

    static Element firstChildElement(Element parent) {
        for (Node c = parent.getFirstChild(); c != null; c = c.getNextSibling()) {
            if (c instanceof Element) {
                return (Element) c;
            }
        }
        return null;
    }
}
