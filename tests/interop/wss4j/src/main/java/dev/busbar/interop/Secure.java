package dev.busbar.interop;

import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import javax.security.auth.callback.Callback;
import javax.security.auth.callback.CallbackHandler;
import javax.security.auth.callback.UnsupportedCallbackException;

import org.apache.wss4j.common.ConfigurationConstants;
import org.apache.wss4j.common.ext.WSPasswordCallback;
import org.apache.wss4j.dom.WSConstants;
import org.apache.wss4j.dom.engine.WSSConfig;
import org.apache.wss4j.dom.handler.HandlerAction;
import org.apache.wss4j.dom.handler.RequestData;
import org.apache.wss4j.dom.handler.WSHandler;
import org.apache.wss4j.dom.util.WSSecurityUtil;
import org.w3c.dom.Document;

/**
 * `secure`: WSS4J's own sender pipeline (WSHandler.doSenderAction, the code path CXF's
 * WSS4JOutInterceptor runs), configured with the same string properties a CXF or Axis2
 * client puts in its configuration. The output is what such a client sends.
 */
final class Secure {
    static final Set<String> OPTIONS = Set.of(
        "keys", "in", "out", "soap", "profile", "actions", "sig-key-id", "sig-alg", "digest",
        "sign-parts", "enc-key-id", "key-transport", "enc", "enc-parts", "user", "password",
        "pw-type", "signer", "recipient", "ttl", "time-offset", "must-understand");

    static final Map<String, String> KEY_IDS = Map.of(
        "DirectReference", "DirectReference",
        "IssuerSerial", "IssuerSerial",
        "SKIKeyIdentifier", "SKIKeyIdentifier",
        "Thumbprint", "Thumbprint",
        "X509KeyIdentifier", "X509KeyIdentifier");
    static final Map<String, String> SIG_ALGS = Map.of(
        "rsa-sha1", WSConstants.RSA_SHA1,
        "rsa-sha256", WSConstants.RSA_SHA256);
    static final Map<String, String> DIGESTS = Map.of(
        "sha1", WSConstants.SHA1,
        "sha256", WSConstants.SHA256);
    static final Map<String, String> KEY_TRANSPORTS = Map.of(
        "rsa15", WSConstants.KEYTRANSPORT_RSA15,
        "oaep", WSConstants.KEYTRANSPORT_RSAOAEP);
    static final Map<String, String> CIPHERS = Map.of(
        "aes128-cbc", WSConstants.AES_128,
        "aes256-cbc", WSConstants.AES_256,
        "aes128-gcm", WSConstants.AES_128_GCM,
        "aes256-gcm", WSConstants.AES_256_GCM);
    static final Map<String, String> PW_TYPES = Map.of(
        "text", WSConstants.PW_TEXT,
        "digest", WSConstants.PW_DIGEST);
    static final Map<String, String> SOAP_VERSIONS = Map.of("11", "11", "12", "12");
    static final Map<String, String> BOOLEANS = Map.of("true", "true", "false", "false");

    /** --profile: a named set of algorithm defaults, overridden by the single options. */
    static final Map<String, Map<String, String>> PROFILES = Map.of(
        "legacy", Map.of("sig-alg", "rsa-sha1", "digest", "sha1", "key-transport", "rsa15",
                         "enc", "aes128-cbc"),
        "modern", Map.of("sig-alg", "rsa-sha256", "digest", "sha256", "key-transport", "oaep",
                         "enc", "aes256-gcm"));

    static final String DEFAULT_ACTIONS = "Timestamp Signature Encrypt";
    static final String DEFAULT_SIGN_PARTS = "Timestamp;Body";
    static final String DEFAULT_ENC_PARTS = "{Content}{}Body";

    private Secure() {}

    static Document run(Args args, Keys keys, Document doc) throws Exception {
        String soap = args.choice("soap", SOAP_VERSIONS);
        if (soap != null) {
            doc = Xml.convertSoap(doc, soap);
        }
        Xml.soapVersion(doc);

        Map<String, String> profile = Map.of();
        if (args.has("profile")) {
            profile = PROFILES.get(args.get("profile"));
            if (profile == null) {
                throw new Args.UsageException("--profile must be one of " + PROFILES.keySet());
            }
        }

        String actions = args.get("actions", DEFAULT_ACTIONS).trim();
        List<String> actionNames = List.of(actions.split("\\s+"));
        for (String a : actionNames) {
            if (!List.of("Timestamp", "Signature", "Encrypt", "UsernameToken").contains(a)) {
                throw new Args.UsageException("--actions takes Timestamp, Signature, Encrypt, UsernameToken; not " + a);
            }
        }

        String signer = args.get("signer", "client");
        String recipient = args.get("recipient", "server");
        String user = args.get("user");
        String utPassword = args.get("password");

        // The message context: every key is a WSS4J ConfigurationConstants name.
        Map<String, Object> mc = new HashMap<>();
        mc.put(ConfigurationConstants.ACTION, actions);
        mc.put(ConfigurationConstants.MUST_UNDERSTAND, args.get("must-understand", "true"));
        if (!BOOLEANS.containsKey(mc.get(ConfigurationConstants.MUST_UNDERSTAND))) {
            throw new Args.UsageException("--must-understand must be true or false");
        }
        mc.put(ConfigurationConstants.TTL_TIMESTAMP, Integer.toString(args.integer("ttl", 300)));

        if (actionNames.contains("Signature")) {
            mc.put(ConfigurationConstants.SIGNATURE_USER, signer);
            mc.put(ConfigurationConstants.SIG_PROP_REF_ID, "signatureCrypto");
            mc.put("signatureCrypto", keys.privateCrypto(signer, null));
            mc.put(ConfigurationConstants.SIG_KEY_ID,
                   orDefault(args.choice("sig-key-id", KEY_IDS), "DirectReference"));
            put(mc, ConfigurationConstants.SIG_ALGO, option(args, "sig-alg", SIG_ALGS, profile));
            put(mc, ConfigurationConstants.SIG_DIGEST_ALGO, option(args, "digest", DIGESTS, profile));
            mc.put(ConfigurationConstants.SIGNATURE_PARTS,
                   parts(args.get("sign-parts", DEFAULT_SIGN_PARTS), "Element"));
        }
        if (actionNames.contains("Encrypt")) {
            mc.put(ConfigurationConstants.ENCRYPTION_USER, recipient);
            mc.put(ConfigurationConstants.ENC_PROP_REF_ID, "encryptionCrypto");
            mc.put("encryptionCrypto", keys.certCrypto(List.of(recipient)));
            mc.put(ConfigurationConstants.ENC_KEY_ID,
                   orDefault(args.choice("enc-key-id", KEY_IDS), "SKIKeyIdentifier"));
            put(mc, ConfigurationConstants.ENC_KEY_TRANSPORT,
                option(args, "key-transport", KEY_TRANSPORTS, profile));
            put(mc, ConfigurationConstants.ENC_SYM_ALGO, option(args, "enc", CIPHERS, profile));
            mc.put(ConfigurationConstants.ENCRYPTION_PARTS,
                   parts(args.get("enc-parts", DEFAULT_ENC_PARTS), "Content"));
        }
        if (actionNames.contains("UsernameToken")) {
            if (user == null || utPassword == null) {
                throw new Args.UsageException("UsernameToken needs --user and --password");
            }
            mc.put(ConfigurationConstants.USER, user);
            mc.put(ConfigurationConstants.PASSWORD_TYPE,
                   orDefault(args.choice("pw-type", PW_TYPES), WSConstants.PW_TEXT));
            mc.put(ConfigurationConstants.ADD_USERNAMETOKEN_NONCE, "true");
            mc.put(ConfigurationConstants.ADD_USERNAMETOKEN_CREATED, "true");
        }

        Map<String, String> passwords = new HashMap<>();
        passwords.put(signer, Keys.password(signer));
        if (user != null && utPassword != null) {
            passwords.put(user, utPassword);
        }

        Passwords callback = new Passwords(passwords);
        mc.put(ConfigurationConstants.PW_CALLBACK_REF, callback);

        WSSConfig config = WSSConfig.getNewInstance();
        // Shifts the clock of Timestamp and UsernameToken Created: stale or future messages.
        int offset = args.integer("time-offset", 0);
        if (offset != 0) {
            config.setCurrentTime(() -> Instant.now().plusSeconds(offset));
        }
        RequestData reqData = new RequestData();
        reqData.setWssConfig(config);
        reqData.setMsgContext(mc);
        reqData.setCallbackHandler(callback);
        // As CXF's and Axis2's handlers do: the "user" option becomes the request's user.
        reqData.setUsername(user);
        List<HandlerAction> handlerActions = WSSecurityUtil.decodeHandlerAction(actions, config);
        new Sender(mc).send(doc, reqData, handlerActions);
        return doc;
    }

    private static String option(Args args, String key, Map<String, String> allowed,
                                 Map<String, String> profile) throws Args.UsageException {
        String v = args.choice(key, allowed);
        if (v == null && profile.containsKey(key)) {
            v = allowed.get(profile.get(key));
        }
        return v;
    }

    private static void put(Map<String, Object> mc, String key, String value) {
        if (value != null) {
            mc.put(key, value);
        }
    }

    private static String orDefault(String v, String fallback) {
        return v == null ? fallback : v;
    }

    /**
     * WSS4J's part syntax ("{Mode}{namespace}LocalName", ';'-separated; "{}" namespace means
     * the SOAP envelope's), plus the short names Body, Timestamp and UsernameToken.
     */
    static String parts(String spec, String mode) {
        List<String> out = new ArrayList<>();
        for (String p : spec.split(";")) {
            String part = p.trim();
            if (part.isEmpty()) {
                continue;
            }
            switch (part) {
                case "Body":
                    out.add("{" + mode + "}{}Body");
                    break;
                case "Timestamp":
                    out.add("{Element}{" + WSConstants.WSU_NS + "}Timestamp");
                    break;
                case "UsernameToken":
                    out.add("{Element}{" + WSConstants.WSSE_NS + "}UsernameToken");
                    break;
                default:
                    out.add(part);
            }
        }
        return String.join(";", out);
    }

    /** Answers WSS4J's password callbacks: key store passwords and the UsernameToken's. */
    static final class Passwords implements CallbackHandler {
        private final Map<String, String> passwords;

        Passwords(Map<String, String> passwords) {
            this.passwords = passwords;
        }

        @Override
        public void handle(Callback[] callbacks) throws UnsupportedCallbackException {
            for (Callback c : callbacks) {
                if (!(c instanceof WSPasswordCallback)) {
                    throw new UnsupportedCallbackException(c);
                }
                WSPasswordCallback pc = (WSPasswordCallback) c;
                String pw = passwords.get(pc.getIdentifier());
                if (pw != null) {
                    pc.setPassword(pw);
                }
            }
        }
    }

    /** The smallest WSHandler: configuration comes from the message context map. */
    static final class Sender extends WSHandler {
        private final Map<String, Object> mc;

        Sender(Map<String, Object> mc) {
            this.mc = mc;
        }

        void send(Document doc, RequestData reqData, List<HandlerAction> actions) throws Exception {
            doSenderAction(doc, reqData, actions, true);
        }

        @Override
        public Object getOption(String key) {
            return null;
        }

        @Override
        public Object getProperty(Object msgContext, String key) {
            return mc.get(key);
        }

        @Override
        public void setProperty(Object msgContext, String key, Object value) {
            mc.put(key, value);
        }

        @Override
        public String getPassword(Object msgContext) {
            return null;
        }

        @Override
        public void setPassword(Object msgContext, String password) {
            // Passwords come from the callback handler.
        }
    }
}
