package dev.busbar.interop;

import java.security.cert.X509Certificate;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.wss4j.dom.WSConstants;
import org.apache.wss4j.dom.WSDataRef;
import org.apache.wss4j.dom.engine.WSSConfig;
import org.apache.wss4j.dom.engine.WSSecurityEngine;
import org.apache.wss4j.dom.engine.WSSecurityEngineResult;
import org.apache.wss4j.dom.handler.RequestData;
import org.apache.wss4j.dom.handler.WSHandlerResult;
import org.apache.wss4j.dom.util.WSSecurityUtil;
import org.w3c.dom.Document;
import org.w3c.dom.Element;

/**
 * `verify`: WSS4J's receiving engine (WSSecurityEngine.processSecurityHeader) with the
 * recipient's key for decryption and the test CA as trust anchor, followed by the coverage
 * checks a WS-Security policy would make: required actions present, the SOAP Body signed,
 * the Timestamp signed, the Body content encrypted.
 */
final class Verify {
    static final Set<String> OPTIONS = Set.of(
        "keys", "in", "out", "require", "recipient", "expect-signer", "print", "ttl", "bsp",
        "user", "password");

    private static final Map<String, Integer> ACTIONS = Map.of(
        "Timestamp", WSConstants.TS,
        "Signature", WSConstants.SIGN,
        "Encrypt", WSConstants.ENCR,
        "UsernameToken", WSConstants.UT);

    /** Leaf certificates looked up by reference (SKI, IssuerSerial, Thumbprint); all CA-issued. */
    private static final List<String> KNOWN_SIGNERS = List.of("server", "server3072", "client", "client3072");

    /** What the caller learns: the text to print and a one-line summary. */
    static final class Outcome {
        final byte[] output;
        final String summary;

        Outcome(byte[] output, String summary) {
            this.output = output;
            this.summary = summary;
        }
    }

    /** A message WSS4J accepted but that misses a required protection. */
    static final class PolicyException extends Exception {
        private static final long serialVersionUID = 1L;

        PolicyException(String message) {
            super(message);
        }
    }

    private Verify() {}

    static Outcome run(Args args, Keys keys, Document doc) throws Exception {
        Xml.soapVersion(doc);
        String recipient = args.get("recipient", "client");
        String expectSigner = args.get("expect-signer");
        String print = args.get("print", "body");
        if (!List.of("body", "envelope", "none").contains(print)) {
            throw new Args.UsageException("--print must be body, envelope or none");
        }
        String bsp = args.get("bsp", "true");
        if (!List.of("true", "false").contains(bsp)) {
            throw new Args.UsageException("--bsp must be true or false");
        }
        Set<String> required = new LinkedHashSet<>(List.of(
            args.get("require", "Timestamp Signature Encrypt").trim().split("\\s+")));
        for (String r : required) {
            if (!ACTIONS.containsKey(r)) {
                throw new Args.UsageException("--require takes " + ACTIONS.keySet() + "; not " + r);
            }
        }

        List<String> trusted = new ArrayList<>();
        trusted.add("ca");
        trusted.addAll(expectSigner != null ? List.of(expectSigner) : KNOWN_SIGNERS);

        RequestData reqData = new RequestData();
        reqData.setWssConfig(WSSConfig.getNewInstance());
        reqData.setDecCrypto(keys.privateCrypto(recipient, null));
        reqData.setSigVerCrypto(keys.certCrypto(trusted));
        Map<String, String> passwords = new HashMap<>();
        passwords.put(recipient, Keys.password(recipient));
        if (args.has("user") != args.has("password")) {
            throw new Args.UsageException("--user and --password go together");
        }
        if (args.has("user")) {
            // The one UsernameToken account this receiver knows.
            passwords.put(args.get("user"), args.get("password"));
        }
        reqData.setCallbackHandler(new Secure.Passwords(passwords));
        // busbar's legacy profile uses RSA 1.5; WSS4J refuses it unless told otherwise.
        reqData.setAllowRSA15KeyTransportAlgorithm(true);
        reqData.setDisableBSPEnforcement(!"true".equals(bsp));
        int ttl = args.integer("ttl", 300);
        reqData.setTimeStampTTL(ttl);
        reqData.setTimeStampStrict(true);

        WSSecurityEngine engine = new WSSecurityEngine();
        WSHandlerResult result = engine.processSecurityHeader(doc, reqData);
        if (result == null || result.getResults().isEmpty()) {
            throw new PolicyException("no wsse:Security header for this actor");
        }

        for (String r : required) {
            List<WSSecurityEngineResult> found = result.getActionResults().get(ACTIONS.get(r));
            if (found == null || found.isEmpty()) {
                throw new PolicyException("required " + r + " missing");
            }
        }

        Element body = WSSecurityUtil.findBodyElement(doc);
        if (body == null) {
            throw new PolicyException("no SOAP Body");
        }

        List<String> summary = new ArrayList<>();
        List<WSSecurityEngineResult> sigs = results(result, WSConstants.SIGN);
        if (required.contains("Signature")) {
            List<WSSecurityEngineResult> timestamps = results(result, WSConstants.TS);
            boolean bodySigned = false;
            boolean timestampSigned = timestamps.isEmpty();
            for (WSSecurityEngineResult sig : sigs) {
                for (WSDataRef ref : dataRefs(sig)) {
                    bodySigned |= ref.getProtectedElement() == body;
                    for (WSSecurityEngineResult ts : timestamps) {
                        timestampSigned |= ref.getProtectedElement() == ts.get(WSSecurityEngineResult.TAG_TOKEN_ELEMENT);
                    }
                }
                X509Certificate cert = (X509Certificate) sig.get(WSSecurityEngineResult.TAG_X509_CERTIFICATE);
                if (cert != null) {
                    summary.add("signer=" + cert.getSubjectX500Principal().getName().replace(' ', '_'));
                    if (expectSigner != null && !cert.equals(keys.cert(expectSigner))) {
                        throw new PolicyException("signed with " + cert.getSubjectX500Principal()
                            + " serial " + cert.getSerialNumber().toString(16) + ", not " + expectSigner + ".pem");
                    }
                }
                summary.add("sig=" + tail(sig.get(WSSecurityEngineResult.TAG_SIGNATURE_METHOD)));
                summary.add("sig-ref=" + sig.get(WSSecurityEngineResult.TAG_X509_REFERENCE_TYPE));
            }
            if (!bodySigned) {
                throw new PolicyException("the SOAP Body is not signed");
            }
            if (!timestampSigned) {
                throw new PolicyException("the Timestamp is not signed");
            }
        }
        if (required.contains("Encrypt")) {
            boolean bodyEncrypted = false;
            for (WSSecurityEngineResult enc : results(result, WSConstants.ENCR)) {
                for (WSDataRef ref : dataRefs(enc)) {
                    if (ref.getProtectedElement() == body && ref.isContent()) {
                        bodyEncrypted = true;
                        summary.add("enc=" + tail(ref.getAlgorithm()));
                    }
                }
                Object transport = enc.get(WSSecurityEngineResult.TAG_ENCRYPTED_KEY_TRANSPORT_METHOD);
                if (transport != null) {
                    summary.add("key-transport=" + tail(transport));
                }
            }
            if (!bodyEncrypted) {
                throw new PolicyException("the SOAP Body content is not encrypted");
            }
        }

        byte[] out;
        switch (print) {
            case "body": {
                Element first = Xml.firstChildElement(body);
                out = first == null ? new byte[0] : Xml.write(first);
                break;
            }
            case "envelope": {
                Element sec = WSSecurityUtil.getSecurityHeader(doc, null);
                if (sec != null) {
                    sec.getParentNode().removeChild(sec);
                }
                out = Xml.write(doc);
                break;
            }
            default:
                out = new byte[0];
        }
        return new Outcome(out, String.join(" ", summary));
    }

    private static List<WSSecurityEngineResult> results(WSHandlerResult result, int action) {
        List<WSSecurityEngineResult> r = result.getActionResults().get(action);
        return r == null ? List.of() : r;
    }

    @SuppressWarnings("unchecked")
    private static List<WSDataRef> dataRefs(WSSecurityEngineResult r) {
        Object refs = r.get(WSSecurityEngineResult.TAG_DATA_REF_URIS);
        return refs == null ? List.of() : (List<WSDataRef>) refs;
    }

    private static String tail(Object uri) {
        if (uri == null) {
            return "?";
        }
        String s = uri.toString();
        int hash = s.lastIndexOf('#');
        return hash >= 0 ? s.substring(hash + 1) : s;
    }
}
