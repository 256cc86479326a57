package busbar.bench.camel;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.time.Instant;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.regex.Pattern;

import javax.crypto.SecretKey;
import javax.naming.InvalidNameException;
import javax.naming.ldap.LdapName;
import javax.naming.ldap.Rdn;
import javax.security.auth.callback.Callback;
import javax.security.auth.callback.CallbackHandler;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.xml.XMLConstants;
import javax.xml.parsers.DocumentBuilder;
import javax.xml.parsers.DocumentBuilderFactory;
import javax.xml.parsers.ParserConfigurationException;
import javax.xml.transform.OutputKeys;
import javax.xml.transform.Transformer;
import javax.xml.transform.TransformerConfigurationException;
import javax.xml.transform.TransformerException;
import javax.xml.transform.TransformerFactory;
import javax.xml.transform.dom.DOMSource;
import javax.xml.transform.stream.StreamResult;

import org.apache.camel.Exchange;
import org.apache.camel.Message;
import org.apache.wss4j.common.WSEncryptionPart;
import org.apache.wss4j.common.cache.MemoryReplayCache;
import org.apache.wss4j.common.cache.ReplayCache;
import org.apache.wss4j.common.crypto.Merlin;
import org.apache.wss4j.common.ext.WSPasswordCallback;
import org.apache.wss4j.common.ext.WSSecurityException;
import org.apache.wss4j.common.util.KeyUtils;
import org.apache.wss4j.dom.WSConstants;
import org.apache.wss4j.dom.WSDataRef;
import org.apache.wss4j.dom.engine.WSSConfig;
import org.apache.wss4j.dom.engine.WSSecurityEngine;
import org.apache.wss4j.dom.engine.WSSecurityEngineResult;
import org.apache.wss4j.dom.handler.RequestData;
import org.apache.wss4j.dom.handler.WSHandlerResult;
import org.apache.wss4j.dom.message.WSSecEncrypt;
import org.apache.wss4j.dom.message.WSSecHeader;
import org.apache.wss4j.dom.message.WSSecSignature;
import org.apache.wss4j.dom.message.WSSecTimestamp;
import org.apache.wss4j.dom.util.WSSecurityUtil;
import org.w3c.dom.Document;
import org.w3c.dom.Element;
import org.w3c.dom.Node;
import org.xml.sax.ErrorHandler;
import org.xml.sax.SAXException;
import org.xml.sax.SAXParseException;

/**
 * SecureProxy's legacy profile (docs/scenarios.md, "WS-Security"; busbar's config in
 * bench/secure.sh) with Apache WSS4J's DOM API.
 *
 * Request: WSSecurityEngine checks the one Security header of a SOAP 1.1 message (Timestamp,
 * RSA-SHA1 signature, RSA-1.5 + AES-128-CBC encrypted Body content), with server.p12 as the
 * decryption key and ca.pem as the only trust anchor; then the checks WSS4J leaves to its
 * caller: the real Body and the Timestamp signed, the Body content encrypted, the signer's
 * subject CN=client. A replay cache of (Created, SignatureValue) is on, as in busbar's fresh
 * profile. The Security header is removed and the rest of the message goes to the back end.
 *
 * Response: a Timestamp (5 minutes), an RSA-SHA1 signature with SHA-1 digests over Body and
 * Timestamp by server.p12 (its certificate as a BinarySecurityToken), and the Body content
 * encrypted (RSA-1.5, AES-128-CBC) for the certificate that signed the request (named by its
 * SubjectKeyIdentifier).
 *
 * The message outside the Security header keeps its bytes as far as a DOM round trip allows:
 * what precedes the root element and the white space after it are copied from the input, the
 * root element is written by the JDK's own serializer (namespace declarations before the other
 * attributes, as the kit inserts the Body's wsu:Id).
 */
final class SecureProxy {
    static final String SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/";
    static final String WSSE = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd";
    /** The exchange property holding the certificate that signed the request. */
    static final String SIGNER = "busbar.secure.signer";
    static final int TTL_SECONDS = 300;
    private static final List<Pattern> SUBJECT = List.of(Pattern.compile("CN=client(,.*)?"));

    /** A refused request: answered with HTTP 500 and a SOAP 1.1 fault naming the wsse code. */
    static final class Fault extends Exception {
        private static final long serialVersionUID = 1L;
        final String code;
        final String reason;

        Fault(String code, String reason, String detail, Throwable cause) {
            super(code + ": " + detail, cause);
            this.code = code;
            this.reason = reason;
        }

        static Fault of(String code, String detail) {
            return new Fault(code, reasonOf(code), detail, null);
        }

        static Fault of(WSSecurityException e) {
            String code;
            switch (e.getErrorCode() == null ? "" : e.getErrorCode().name()) {
                case "UNSUPPORTED_SECURITY_TOKEN": code = "UnsupportedSecurityToken"; break;
                case "UNSUPPORTED_ALGORITHM": code = "UnsupportedAlgorithm"; break;
                case "INVALID_SECURITY_TOKEN": code = "InvalidSecurityToken"; break;
                case "FAILED_AUTHENTICATION": code = "FailedAuthentication"; break;
                case "FAILED_CHECK": code = "FailedCheck"; break;
                case "SECURITY_TOKEN_UNAVAILABLE": code = "SecurityTokenUnavailable"; break;
                case "MESSAGE_EXPIRED": code = "MessageExpired"; break;
                default: code = "InvalidSecurity"; break;
            }
            return new Fault(code, reasonOf(code), String.valueOf(e.getMessage()), e);
        }

        /** busbar's generic fault strings (the detail is never sent). */
        private static String reasonOf(String code) {
            switch (code) {
                case "UnsupportedSecurityToken": return "An unsupported token was provided";
                case "UnsupportedAlgorithm": return "An unsupported signature or encryption algorithm was used";
                case "InvalidSecurityToken": return "An invalid security token was provided";
                case "FailedAuthentication": return "The security token could not be authenticated or authorized";
                case "FailedCheck": return "The signature or decryption was invalid";
                case "SecurityTokenUnavailable": return "Referenced security token could not be retrieved";
                case "MessageExpired": return "The message has expired";
                default: return "An error was discovered processing the Security header";
            }
        }

        byte[] body() {
            // MessageExpired is a wsu code in WS-Security 1.0; the others are wsse codes.
            String qname = "MessageExpired".equals(code) ? "wsu:" + code : "wsse:" + code;
            return ("<soapenv:Envelope xmlns:soapenv=\"" + SOAP11 + "\"><soapenv:Body><soapenv:Fault>"
                    + "<faultcode xmlns:wsse=\"" + WSSE + "\" xmlns:wsu=\"" + WSConstants.WSU_NS + "\">"
                    + qname + "</faultcode><faultstring>Security validation failed: " + reason
                    + "</faultstring></soapenv:Fault></soapenv:Body></soapenv:Envelope>")
                    .getBytes(StandardCharsets.UTF_8);
        }
    }

    private final Merlin serverCrypto;
    private final Merlin trustCrypto;
    private final String alias;
    private final String password;
    private final CallbackHandler passwords;
    private final WSSConfig config;
    private final ReplayCache replayCache;
    private final DocumentBuilderFactory parsers;
    private final TransformerFactory writers;
    private final ThreadLocal<DocumentBuilder> parser = new ThreadLocal<>();
    private final ThreadLocal<Transformer> writer = new ThreadLocal<>();

    /** Reads server.p12 (password {@code serverPassword}) and ca.pem from {@code keys}. */
    SecureProxy(Path keys, String serverPassword) throws IOException, GeneralSecurityException {
        WSSConfig.init();
        KeyStore server = KeyStore.getInstance("PKCS12");
        try (InputStream in = Files.newInputStream(keys.resolve("server.p12"))) {
            server.load(in, serverPassword.toCharArray());
        }
        String keyAlias = null;
        for (String a : Collections.list(server.aliases())) {
            if (server.isKeyEntry(a)) {
                keyAlias = a;
                break;
            }
        }
        if (keyAlias == null) {
            throw new GeneralSecurityException(keys.resolve("server.p12") + " holds no private key");
        }
        alias = keyAlias;
        password = serverPassword;
        serverCrypto = new Merlin();
        serverCrypto.setKeyStore(server);

        KeyStore trust = KeyStore.getInstance("PKCS12");
        trust.load(null, null);
        try (InputStream in = Files.newInputStream(keys.resolve("ca.pem"))) {
            trust.setCertificateEntry("ca", CertificateFactory.getInstance("X.509").generateCertificate(in));
        }
        trustCrypto = new Merlin();
        trustCrypto.setTrustStore(trust);

        passwords = callbacks -> {
            for (Callback c : callbacks) {
                if (c instanceof WSPasswordCallback) {
                    ((WSPasswordCallback) c).setPassword(serverPassword);
                } else {
                    throw new UnsupportedCallbackException(c);
                }
            }
        };
        config = WSSConfig.getNewInstance();
        replayCache = new MemoryReplayCache();

        // The JDK's own parser and serializer: Saxon, on the class path for XSLTProxy, would
        // otherwise be TransformerFactory.newInstance().
        parsers = DocumentBuilderFactory.newDefaultInstance();
        parsers.setNamespaceAware(true);
        parsers.setExpandEntityReferences(false);
        try {
            parsers.setFeature(XMLConstants.FEATURE_SECURE_PROCESSING, true);
            parsers.setFeature("http://apache.org/xml/features/disallow-doctype-decl", true);
        } catch (ParserConfigurationException e) {
            throw new IllegalStateException(e);
        }
        writers = TransformerFactory.newDefaultInstance();
    }

    /** The request: verified and decrypted, its Security header removed; the signer is kept. */
    void verifyRequest(Exchange exchange) throws Fault {
        Message m = exchange.getMessage();
        byte[] in = m.getBody(byte[].class);
        if (in == null) {
            throw Fault.of("InvalidSecurity", "empty request");
        }
        Document doc;
        try {
            doc = parse(in);
        } catch (SAXException | IOException e) {
            throw Fault.of("InvalidSecurity", "not XML: " + e.getMessage());
        }
        Element envelope = doc.getDocumentElement();
        if (!SOAP11.equals(envelope.getNamespaceURI()) || !"Envelope".equals(envelope.getLocalName())) {
            throw Fault.of("InvalidSecurity", "not a SOAP 1.1 envelope");
        }

        RequestData data = new RequestData();
        data.setWssConfig(config);
        data.setDecCrypto(serverCrypto);
        data.setSigVerCrypto(trustCrypto);
        data.setCallbackHandler(passwords);
        // The legacy profile's key transport; WSS4J refuses it unless allowed.
        data.setAllowRSA15KeyTransportAlgorithm(true);
        data.setTimeStampStrict(true);
        data.setTimeStampTTL(TTL_SECONDS);
        // WSS4J's own subject check (on the RFC 2253 text) during trust validation; isClient
        // below compares the CN attribute exactly.
        data.setSubjectCertConstraints(SUBJECT);
        WSHandlerResult result;
        try {
            result = new WSSecurityEngine().processSecurityHeader(doc, data);
        } catch (WSSecurityException e) {
            throw Fault.of(e);
        }
        if (result == null || result.getResults().isEmpty()) {
            throw Fault.of("InvalidSecurity", "no Security header");
        }

        // What WSS4J leaves to its caller (a WS-SecurityPolicy layer in CXF): every required
        // action present once, and what each covered.
        Element body = WSSecurityUtil.findBodyElement(doc);
        List<WSSecurityEngineResult> signatures = actions(result, WSConstants.SIGN);
        List<WSSecurityEngineResult> timestamps = actions(result, WSConstants.TS);
        if (signatures.size() != 1) {
            throw Fault.of("InvalidSecurity", signatures.size() + " signatures");
        }
        if (timestamps.size() != 1) {
            throw Fault.of("InvalidSecurity", timestamps.size() + " timestamps");
        }
        Object timestamp = timestamps.get(0).get(WSSecurityEngineResult.TAG_TOKEN_ELEMENT);
        boolean bodySigned = false;
        boolean timestampSigned = false;
        for (WSDataRef ref : dataRefs(signatures.get(0))) {
            bodySigned |= body != null && ref.getProtectedElement() == body;
            timestampSigned |= timestamp != null && ref.getProtectedElement() == timestamp;
        }
        if (!bodySigned) {
            throw Fault.of("InvalidSecurity", "the signature does not cover the SOAP Body");
        }
        if (!timestampSigned) {
            throw Fault.of("InvalidSecurity", "the signature does not cover the Timestamp");
        }
        boolean bodyEncrypted = false;
        for (WSSecurityEngineResult enc : actions(result, WSConstants.ENCR)) {
            for (WSDataRef ref : dataRefs(enc)) {
                bodyEncrypted |= ref.getProtectedElement() == body && ref.isContent();
            }
        }
        if (!bodyEncrypted) {
            throw Fault.of("InvalidSecurity", "the Body was not encrypted");
        }
        X509Certificate signer = (X509Certificate) signatures.get(0).get(WSSecurityEngineResult.TAG_X509_CERTIFICATE);
        if (signer == null || !isClient(signer)) {
            throw Fault.of("FailedAuthentication", "signer "
                    + (signer == null ? "unknown" : signer.getSubjectX500Principal().getName()) + " is not CN=client");
        }

        // Replay: like busbar, only a message that verified is remembered, by its Timestamp's
        // Created and its SignatureValue, until Expires plus the 5 minutes of skew WSS4J allows.
        // (Given to WSS4J as its timestamp replay cache, it would remember a message before its
        // signature is checked, so a replayed tampered message would be refused as a replay.)
        Element ts = (Element) timestamp;
        String created = childText(ts, "Created");
        String expires = childText(ts, "Expires");
        byte[] value = (byte[]) signatures.get(0).get(WSSecurityEngineResult.TAG_SIGNATURE_VALUE);
        String id = created + "|" + (value == null ? "" : Base64.getEncoder().encodeToString(value));
        Instant until = Instant.now().plusSeconds(2 * TTL_SECONDS);
        try {
            if (expires != null) {
                until = Instant.parse(expires).plusSeconds(TTL_SECONDS);
            }
        } catch (DateTimeParseException e) {
            // WSS4J accepted it; keep the default.
        }
        synchronized (replayCache) {
            if (replayCache.contains(id)) {
                throw Fault.of("InvalidSecurity", "replayed message");
            }
            replayCache.add(id, until);
        }

        // The Security header WSS4J processed: the one without an actor, in the Header.
        for (Node n = body.getParentNode().getFirstChild(); n != null; n = n.getNextSibling()) {
            if (n instanceof Element && SOAP11.equals(n.getNamespaceURI()) && "Header".equals(n.getLocalName())) {
                for (Node c = n.getFirstChild(); c != null; c = c.getNextSibling()) {
                    if (c instanceof Element && WSSE.equals(c.getNamespaceURI()) && "Security".equals(c.getLocalName())
                            && !((Element) c).hasAttributeNS(SOAP11, "actor")) {
                        n.removeChild(c);
                        break;
                    }
                }
                break;
            }
        }
        exchange.setProperty(SIGNER, signer);
        m.setBody(write(doc, in));
    }

    /** The back end's answer: timestamped, signed and encrypted for the request's signer. */
    void secureResponse(Exchange exchange) throws Exception {
        Message m = exchange.getMessage();
        Object status = m.getHeader(Exchange.HTTP_RESPONSE_CODE);
        if (status != null && !"200".equals(status.toString())) {
            throw new IllegalStateException("the back end answered HTTP " + status);
        }
        X509Certificate recipient = exchange.getProperty(SIGNER, X509Certificate.class);
        byte[] in = m.getBody(byte[].class);
        Document doc = parse(in);

        WSSecHeader header = new WSSecHeader(doc);
        header.setMustUnderstand(true);
        header.insertSecurityHeader();

        WSSecTimestamp timestamp = new WSSecTimestamp(header);
        timestamp.setTimeToLive(TTL_SECONDS);
        timestamp.build();

        WSSecSignature signature = new WSSecSignature(header);
        signature.setUserInfo(alias, password);
        signature.setKeyIdentifierType(WSConstants.BST_DIRECT_REFERENCE);
        signature.setSignatureAlgorithm(WSConstants.RSA_SHA1);
        signature.setDigestAlgo(WSConstants.SHA1);
        signature.getParts().add(new WSEncryptionPart(WSConstants.ELEM_BODY, SOAP11, ""));
        signature.getParts().add(new WSEncryptionPart(WSConstants.TIMESTAMP_TOKEN_LN, WSConstants.WSU_NS, ""));
        signature.build(serverCrypto);

        WSSecEncrypt encrypt = new WSSecEncrypt(header);
        encrypt.setUseThisCert(recipient);
        encrypt.setKeyIdentifierType(WSConstants.SKI_KEY_IDENTIFIER);
        encrypt.setKeyEncAlgo(WSConstants.KEYTRANSPORT_RSA15);
        encrypt.setSymmetricEncAlgorithm(WSConstants.AES_128);
        encrypt.getParts().add(new WSEncryptionPart(WSConstants.ELEM_BODY, SOAP11, "Content"));
        SecretKey key = KeyUtils.getKeyGenerator(WSConstants.AES_128).generateKey();
        encrypt.build(serverCrypto, key);

        m.getHeaders().clear();
        m.setHeader(Exchange.HTTP_RESPONSE_CODE, 200);
        m.setHeader(Exchange.CONTENT_TYPE, "text/xml; charset=UTF-8");
        m.setBody(write(doc, in));
    }

    /** Answers a refused request with HTTP 500 and its fault; no request header goes back. */
    static void faultReply(Exchange exchange) {
        Fault f = exchange.getProperty(Exchange.EXCEPTION_CAUGHT, Fault.class);
        Message m = exchange.getMessage();
        m.getHeaders().clear();
        m.setHeader(Exchange.HTTP_RESPONSE_CODE, 500);
        m.setHeader(Exchange.CONTENT_TYPE, "text/xml; charset=UTF-8");
        m.setBody(f != null ? f.body() : Fault.of("InvalidSecurity", "unknown").body());
    }

    /** busbar's `subject: "CN=client"`: the subject's CN values are exactly {client}. */
    static boolean isClient(X509Certificate cert) {
        try {
            List<String> cns = new ArrayList<>();
            for (Rdn rdn : new LdapName(cert.getSubjectX500Principal().getName()).getRdns()) {
                if ("CN".equalsIgnoreCase(rdn.getType())) {
                    cns.add(String.valueOf(rdn.getValue()).trim().toLowerCase(Locale.ROOT));
                }
            }
            return cns.equals(List.of("client"));
        } catch (InvalidNameException e) {
            return false;
        }
    }

    private static String childText(Element parent, String localName) {
        for (Node n = parent.getFirstChild(); n != null; n = n.getNextSibling()) {
            if (n instanceof Element && WSConstants.WSU_NS.equals(n.getNamespaceURI())
                    && localName.equals(n.getLocalName())) {
                return n.getTextContent().trim();
            }
        }
        return null;
    }

    private static List<WSSecurityEngineResult> actions(WSHandlerResult result, int action) {
        List<WSSecurityEngineResult> r = result.getActionResults().get(action);
        return r == null ? List.of() : r;
    }

    @SuppressWarnings("unchecked")
    private static List<WSDataRef> dataRefs(WSSecurityEngineResult r) {
        Object refs = r.get(WSSecurityEngineResult.TAG_DATA_REF_URIS);
        return refs == null ? List.of() : (List<WSDataRef>) refs;
    }

    private static final ErrorHandler QUIET = new ErrorHandler() {
        @Override
        public void warning(SAXParseException e) {
        }

        @Override
        public void error(SAXParseException e) throws SAXException {
            throw e;
        }

        @Override
        public void fatalError(SAXParseException e) throws SAXException {
            throw e;
        }
    };

    private Document parse(byte[] xml) throws SAXException, IOException {
        DocumentBuilder b = parser.get();
        if (b == null) {
            try {
                b = parsers.newDocumentBuilder();
            } catch (ParserConfigurationException e) {
                throw new IllegalStateException(e);
            }
            b.setErrorHandler(QUIET);
            parser.set(b);
        } else {
            b.reset();
            b.setErrorHandler(QUIET);
        }
        return b.parse(new ByteArrayInputStream(xml));
    }

    /**
     * The document as bytes: {@code original}'s prolog (declaration, comments) and trailing
     * white space around the serialized root element.
     */
    private byte[] write(Document doc, byte[] original) {
        int start = rootStart(original);
        int end = original.length;
        while (end > start && isSpace(original[end - 1])) {
            end--;
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream(original.length + 8192);
        out.write(original, 0, start);
        try {
            Transformer t = writer.get();
            if (t == null) {
                t = writers.newTransformer();
                t.setOutputProperty(OutputKeys.OMIT_XML_DECLARATION, "yes");
                t.setOutputProperty(OutputKeys.ENCODING, "UTF-8");
                t.setOutputProperty(OutputKeys.INDENT, "no");
                writer.set(t);
            }
            t.transform(new DOMSource(doc.getDocumentElement()), new StreamResult(out));
        } catch (TransformerConfigurationException e) {
            throw new IllegalStateException(e);
        } catch (TransformerException e) {
            throw new IllegalStateException("cannot write the message", e);
        }
        out.write(original, end, original.length - end);
        return out.toByteArray();
    }

    private static boolean isSpace(byte b) {
        return b == ' ' || b == '\n' || b == '\r' || b == '\t';
    }

    /** Where the root element starts: after the declaration, comments and PIs before it. */
    static int rootStart(byte[] x) {
        int i = 0;
        while (i < x.length) {
            if (x[i] != '<') {
                i++;
                continue;
            }
            if (startsWith(x, i, "<?")) {
                i = after(x, i, "?>");
            } else if (startsWith(x, i, "<!--")) {
                i = after(x, i, "-->");
            } else {
                return i;
            }
        }
        return 0;
    }

    private static boolean startsWith(byte[] x, int at, String s) {
        if (at + s.length() > x.length) {
            return false;
        }
        for (int k = 0; k < s.length(); k++) {
            if (x[at + k] != s.charAt(k)) {
                return false;
            }
        }
        return true;
    }

    private static int after(byte[] x, int from, String end) {
        for (int i = from; i + end.length() <= x.length; i++) {
            if (startsWith(x, i, end)) {
                return i + end.length();
            }
        }
        return x.length;
    }
}
