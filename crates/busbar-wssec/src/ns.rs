//! Namespace, algorithm and token-type URIs of the supported profile.

pub const SOAP11: &str = "http://schemas.xmlsoap.org/soap/envelope/";
pub const SOAP12: &str = "http://www.w3.org/2003/05/soap-envelope";
pub const WSSE: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd";
pub const WSSE11: &str = "http://docs.oasis-open.org/wss/oasis-wss-wssecurity-secext-1.1.xsd";
pub const WSU: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd";
pub const DS: &str = "http://www.w3.org/2000/09/xmldsig#";
pub const XENC: &str = "http://www.w3.org/2001/04/xmlenc#";
pub const XENC11: &str = "http://www.w3.org/2009/xmlenc11#";
pub const EXC_C14N: &str = "http://www.w3.org/2001/10/xml-exc-c14n#";

pub const X509V3: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509v3";
pub const X509_SKI: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509SubjectKeyIdentifier";
pub const THUMBPRINT_SHA1: &str =
    "http://docs.oasis-open.org/wss/oasis-wss-soap-message-security-1.1#ThumbprintSHA1";
pub const BASE64_BINARY: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary";
pub const ENCRYPTED_KEY_TOKEN: &str =
    "http://docs.oasis-open.org/wss/oasis-wss-soap-message-security-1.1#EncryptedKey";
pub const PASSWORD_TEXT: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordText";
pub const PASSWORD_DIGEST: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordDigest";

pub const ENC_CONTENT: &str = "http://www.w3.org/2001/04/xmlenc#Content";
pub const ENC_ELEMENT: &str = "http://www.w3.org/2001/04/xmlenc#Element";
pub const MGF1_SHA1: &str = "http://www.w3.org/2009/xmlenc11#mgf1sha1";

/// SOAP 1.1 `actor` / SOAP 1.2 `role` values that address this node.
pub const ACTOR_NEXT_11: &str = "http://schemas.xmlsoap.org/soap/actor/next";
pub const ROLE_NEXT_12: &str = "http://www.w3.org/2003/05/soap-envelope/role/next";
pub const ROLE_ULTIMATE_12: &str = "http://www.w3.org/2003/05/soap-envelope/role/ultimateReceiver";
