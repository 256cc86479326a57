#!/usr/bin/env python3
"""python-xmlsec (libxmlsec1 with OpenSSL) as a second, independent WS-Security peer.

    xmlsec_verify.py verify [--keys DIR] [--recipient client] [--signer server ...]
                            [--require "Timestamp Signature Encrypt"] [--print body|envelope|none]
                            [--ttl-skew SECONDS] [--max-age SECONDS] [IN|-]
    xmlsec_verify.py sign   [--keys DIR] [--signer client] [--recipient server]
                            [--actions "Timestamp Signature Encrypt"] [--profile legacy|modern]
                            [--sig-alg rsa-sha1|rsa-sha256] [--digest sha1|sha256]
                            [--key-transport rsa15|oaep] [--enc aes128-cbc|aes256-cbc|aes128-gcm|aes256-gcm]
                            [--ttl SECONDS] [--time-offset SECONDS] [--out FILE] [IN|-]

verify: decrypts the xenc:EncryptedKey in the wsse:Security header with the recipient's key
(NAME.key), decrypts the xenc:EncryptedData it lists, verifies the ds:Signature with the
certificate its SecurityTokenReference names (a BinarySecurityToken in the header, or one
of the --signer certificates by SubjectKeyIdentifier, thumbprint or issuer and serial),
lets libxmlsec check that certificate against ca.pem, checks that the real SOAP Body and
the header's Timestamp are signed and the Timestamp is current, and prints the decrypted
Body's first element. Exit 0 on success, 1 with the reason on stderr otherwise, 2 on a
wrong command line.

sign: the other direction. Adds a Timestamp, a BinarySecurityToken with the signer's
certificate, a Signature over the Body and the Timestamp, and (with Encrypt) encrypts the
Body content for the recipient, the EncryptedKey naming the recipient by
SubjectKeyIdentifier. Header order: Timestamp, EncryptedKey, BinarySecurityToken,
Signature (not WSS4J's order, on purpose).

Keys come from tests/interop/keys.sh: NAME.pem, NAME.key, ca.pem.
"""

import argparse
import base64
import copy
import datetime
import hashlib
import os
import sys
import uuid

import xmlsec
from cryptography import x509
from lxml import etree

SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
SOAP12 = "http://www.w3.org/2003/05/soap-envelope"
WSSE = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd"
WSSE11 = "http://docs.oasis-open.org/wss/oasis-wss-wssecurity-secext-1.1.xsd"
WSU = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd"
DS = "http://www.w3.org/2000/09/xmldsig#"
XENC = "http://www.w3.org/2001/04/xmlenc#"
X509V3 = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509v3"
SKI = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509SubjectKeyIdentifier"
THUMBPRINT = "http://docs.oasis-open.org/wss/oasis-wss-soap-message-security-1.1#ThumbprintSHA1"
BASE64 = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary"
ENCRYPTED_KEY_TOKEN = "http://docs.oasis-open.org/wss/oasis-wss-soap-message-security-1.1#EncryptedKey"
EXC_C14N = "http://www.w3.org/2001/10/xml-exc-c14n#"
CONTENT = XENC + "Content"

SIG_ALGS = {"rsa-sha1": xmlsec.Transform.RSA_SHA1, "rsa-sha256": xmlsec.Transform.RSA_SHA256}
DIGESTS = {"sha1": xmlsec.Transform.SHA1, "sha256": xmlsec.Transform.SHA256}
KEY_TRANSPORTS = {"rsa15": xmlsec.Transform.RSA_PKCS1, "oaep": xmlsec.Transform.RSA_OAEP}
CIPHERS = {
    "aes128-cbc": (xmlsec.Transform.AES128, 128),
    "aes256-cbc": (xmlsec.Transform.AES256, 256),
    "aes128-gcm": (xmlsec.Transform.AES128_GCM, 128),
    "aes256-gcm": (xmlsec.Transform.AES256_GCM, 256),
}
PROFILES = {
    "legacy": {"sig_alg": "rsa-sha1", "digest": "sha1", "key_transport": "rsa15", "enc": "aes128-cbc"},
    "modern": {"sig_alg": "rsa-sha256", "digest": "sha256", "key_transport": "oaep", "enc": "aes256-gcm"},
}
ACTIONS = ("Timestamp", "Signature", "Encrypt")


class Rejected(Exception):
    """The message is not acceptable; the text says why."""


def q(ns, name):
    return "{%s}%s" % (ns, name)


def child(parent, ns, name):
    """First child element by name. Unlike find(), this also sees elements libxmlsec
    created, whose names are not interned in lxml's dictionary."""
    tag = q(ns, name)
    return next((c for c in parent if c.tag == tag), None)


# --- input, keys ----------------------------------------------------------------------------

def read_input(path):
    if path in (None, "-"):
        return sys.stdin.buffer.read()
    with open(path, "rb") as f:
        return f.read()


def parse(data):
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                             huge_tree=False, remove_blank_text=False)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as e:
        raise Rejected("not well-formed XML: %s" % e)
    tree = root.getroottree()
    if tree.docinfo.doctype or tree.docinfo.internalDTD is not None:
        raise Rejected("DOCTYPE not allowed")
    return root


def envelope_parts(root):
    """(soap namespace, Header or None, Body) of an envelope, by position."""
    ns = etree.QName(root).namespace
    if etree.QName(root).localname != "Envelope" or ns not in (SOAP11, SOAP12):
        raise Rejected("document element is not a SOAP 1.1/1.2 Envelope")
    children = [c for c in root if isinstance(c.tag, str)]
    header = None
    if children and children[0].tag == q(ns, "Header"):
        header = children.pop(0)
    if len(children) != 1 or children[0].tag != q(ns, "Body"):
        raise Rejected("Envelope must hold an optional Header and then exactly one Body")
    return ns, header, children[0]


def key_path(keys, name, ext):
    path = os.path.join(keys, name + ext)
    if not os.path.isfile(path):
        raise Rejected("no %s (run tests/interop/keys.sh %s)" % (path, keys))
    return path


def load_cert(keys, name):
    with open(key_path(keys, name, ".pem"), "rb") as f:
        return x509.load_pem_x509_certificate(f.read())


def der(cert):
    from cryptography.hazmat.primitives.serialization import Encoding
    return cert.public_bytes(Encoding.DER)


def ski(cert):
    try:
        return cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    except x509.ExtensionNotFound:
        return None


def b64(data):
    return base64.b64encode(data).decode("ascii")


def unb64(text):
    try:
        return base64.b64decode("".join((text or "").split()), validate=True)
    except ValueError:
        raise Rejected("bad base64")


def normalise_dn(dn):
    # "CN=x, O=y" and "CN=x,O=y" name the same issuer; enough for test certificates.
    return ",".join(part.strip() for part in dn.split(","))


# --- token references -------------------------------------------------------------------------

def referenced_cert(str_el, security, candidates):
    """The certificate a wsse:SecurityTokenReference (or ds:X509Data) points at, as DER."""
    if str_el is None:
        raise Rejected("KeyInfo has no SecurityTokenReference")
    ref = str_el.find(q(WSSE, "Reference"))
    if ref is not None:
        uri = ref.get("URI", "")
        if not uri.startswith("#"):
            raise Rejected("token reference %r is not a same-document reference" % uri)
        bsts = [b for b in security.findall(q(WSSE, "BinarySecurityToken"))
                if b.get(q(WSU, "Id")) == uri[1:] or b.get("Id") == uri[1:]]
        if len(bsts) != 1:
            raise Rejected("token reference %s does not name one BinarySecurityToken in this header" % uri)
        if bsts[0].get("ValueType") != X509V3:
            raise Rejected("BinarySecurityToken is not an X509v3 certificate")
        return unb64(bsts[0].text)
    kid = str_el.find(q(WSSE, "KeyIdentifier"))
    if kid is not None:
        value = unb64(kid.text)
        vt = kid.get("ValueType")
        if vt == X509V3:
            return value
        for cert in candidates:
            if vt == SKI and ski(cert) == value:
                return der(cert)
            if vt == THUMBPRINT and hashlib.sha1(der(cert)).digest() == value:
                return der(cert)
        raise Rejected("no known certificate matches KeyIdentifier %s" % vt)
    x509data = str_el.find(q(DS, "X509Data")) if str_el.tag != q(DS, "X509Data") else str_el
    if x509data is not None:
        iss = x509data.find(q(DS, "X509IssuerSerial"))
        if iss is not None:
            name = normalise_dn(iss.findtext(q(DS, "X509IssuerName"), ""))
            serial = int(iss.findtext(q(DS, "X509SerialNumber"), "-1").strip())
            for cert in candidates:
                if cert.serial_number == serial and normalise_dn(cert.issuer.rfc4514_string()) == name:
                    return der(cert)
            raise Rejected("no known certificate matches X509IssuerSerial")
    raise Rejected("unsupported token reference")


# --- verify -------------------------------------------------------------------------------------

def verify(args):
    root = parse(read_input(args.input))
    soap, header, body = envelope_parts(root)
    if header is None:
        raise Rejected("no SOAP Header")
    securities = header.findall(q(WSSE, "Security"))
    if len(securities) != 1:
        raise Rejected("expected one wsse:Security header, found %d" % len(securities))
    security = securities[0]
    required = set(args.require.split())
    unknown = required - set(ACTIONS)
    if unknown:
        raise SystemExit("xmlsec_verify.py: --require takes %s" % " ".join(ACTIONS))

    # Ids must be unique before any reference is followed.
    seen = {}
    for el in root.iter():
        if not isinstance(el.tag, str):
            continue
        for attr in (q(WSU, "Id"), "Id"):
            v = el.get(attr)
            if v is not None:
                if v in seen and seen[v] is not el:
                    raise Rejected("duplicate Id %r" % v)
                seen[v] = el
    xmlsec.tree.add_ids(root, ["Id"])

    recipient_cert = load_cert(args.keys, args.recipient)
    signers = [load_cert(args.keys, n) for n in args.signer]
    notes = []

    # 1. Decrypt: EncryptedKey with the recipient's key, then the EncryptedData it lists.
    body_decrypted = False
    for ek in security.findall(q(XENC, "EncryptedKey")):
        ek_ki = ek.find(q(DS, "KeyInfo"))
        str_el = None if ek_ki is None else (ek_ki.find(q(WSSE, "SecurityTokenReference"))
                                              if ek_ki.find(q(WSSE, "SecurityTokenReference")) is not None
                                              else ek_ki.find(q(DS, "X509Data")))
        try:
            for_us = referenced_cert(str_el, security, [recipient_cert]) == der(recipient_cert)
        except Rejected as e:
            raise Rejected("EncryptedKey is not for %s.pem (%s)" % (args.recipient, e))
        if not for_us:
            raise Rejected("EncryptedKey is not for %s.pem" % args.recipient)
        method = ek.find(q(XENC, "EncryptionMethod"))
        notes.append("key-transport=" + (method.get("Algorithm", "?").rsplit("#", 1)[-1] if method is not None else "?"))
        ctx = xmlsec.EncryptionContext()
        ctx.key = xmlsec.Key.from_file(key_path(args.keys, args.recipient, ".key"), xmlsec.KeyFormat.PEM)
        try:
            session = ctx.decrypt(ek)
        except xmlsec.Error as e:
            raise Rejected("cannot decrypt EncryptedKey: %s" % e)
        refs = ek.find(q(XENC, "ReferenceList"))
        if refs is None:
            refs = security.find(q(XENC, "ReferenceList"))
        if refs is None:
            raise Rejected("EncryptedKey has no ReferenceList (and the header has none)")
        for dref in refs.findall(q(XENC, "DataReference")):
            uri = dref.get("URI", "")
            target = seen.get(uri[1:]) if uri.startswith("#") else None
            if target is None or target.tag != q(XENC, "EncryptedData"):
                raise Rejected("DataReference %r does not name an EncryptedData" % uri)
            parent = target.getparent()
            content = target.get("Type") == CONTENT
            alg = target.find(q(XENC, "EncryptionMethod")).get("Algorithm", "")
            dctx = xmlsec.EncryptionContext()
            dctx.key = xmlsec.Key.from_binary_data(xmlsec.KeyData.AES, session)
            try:
                dctx.decrypt(target)
            except xmlsec.Error as e:
                raise Rejected("cannot decrypt %s: %s" % (uri, e))
            notes.append("enc=" + alg.rsplit("#", 1)[-1])
            if content and parent is body:
                body_decrypted = True
    if "Encrypt" in required and not body_decrypted:
        raise Rejected("the SOAP Body content is not encrypted")
    # Decryption added elements: refresh the Id table (signed Ids live in the plaintext too).
    xmlsec.tree.add_ids(root, ["Id"])

    # 2. Timestamp: one, current.
    stamps = security.findall(q(WSU, "Timestamp"))
    if "Timestamp" in required:
        if len(stamps) != 1:
            raise Rejected("expected one Timestamp, found %d" % len(stamps))
        check_timestamp(stamps[0], args.ttl_skew, args.max_age)

    # 3. Signature: libxmlsec verifies it with the referenced certificate and the CA.
    if "Signature" in required:
        sigs = security.findall(q(DS, "Signature"))
        if len(sigs) != 1:
            raise Rejected("expected one ds:Signature in the header, found %d" % len(sigs))
        sig = sigs[0]
        ki = sig.find(q(DS, "KeyInfo"))
        if ki is None:
            raise Rejected("Signature has no KeyInfo")
        str_el = ki.find(q(WSSE, "SecurityTokenReference"))
        cert_der = referenced_cert(str_el, security, signers)
        # First the signature alone, with the certificate's key, so that a bad signature
        # and an untrusted certificate give different reasons.
        ctx = xmlsec.SignatureContext()
        ctx.key = xmlsec.Key.from_memory(cert_der, xmlsec.KeyFormat.CERT_DER)
        try:
            ctx.verify(sig)
        except xmlsec.Error as e:
            raise Rejected("signature does not verify (digest or SignatureValue): %s" % (e,))
        # libxmlsec does not read wsse:SecurityTokenReference; give it the certificate
        # as ds:X509Data instead so that it validates the chain itself. KeyInfo is not
        # covered by the signature, so this changes nothing that was signed.
        for c in list(ki):
            ki.remove(c)
        data = etree.SubElement(ki, q(DS, "X509Data"))
        etree.SubElement(data, q(DS, "X509Certificate")).text = b64(cert_der)
        manager = xmlsec.KeysManager()
        manager.load_cert(key_path(args.keys, "ca", ".pem"), xmlsec.KeyFormat.PEM, xmlsec.KeyDataType.TRUSTED)
        ctx = xmlsec.SignatureContext(manager)
        try:
            ctx.verify(sig)
        except xmlsec.Error as e:
            raise Rejected("signer certificate not trusted by ca.pem (chain or validity): %s" % (e,))
        signed = []
        for ref in sig.find(q(DS, "SignedInfo")).findall(q(DS, "Reference")):
            uri = ref.get("URI", "")
            if not uri.startswith("#") or uri[1:] not in seen:
                raise Rejected("reference %r is not a same-document Id" % uri)
            signed.append(seen[uri[1:]])
        if not any(el is body for el in signed):
            raise Rejected("the SOAP Body is not signed")
        if stamps and not any(el is stamps[0] for el in signed):
            raise Rejected("the Timestamp is not signed")
        method = sig.find(q(DS, "SignedInfo")).find(q(DS, "SignatureMethod")).get("Algorithm", "")
        cert = x509.load_der_x509_certificate(cert_der)
        notes.insert(0, "sig=%s signer=%s" % (method.rsplit("#", 1)[-1], cert.subject.rfc4514_string().replace(" ", "_")))

    if args.print == "body":
        first = next((c for c in body if isinstance(c.tag, str)), None)
        if first is None:
            out = b""
        else:
            # A detached copy keeps every in-scope declaration; drop the unused ones.
            first = copy.deepcopy(first)
            etree.cleanup_namespaces(first)
            out = etree.tostring(first, with_tail=False)
    elif args.print == "envelope":
        header.remove(security)
        out = etree.tostring(root)
    else:
        out = b""
    if out:
        sys.stdout.buffer.write(out + b"\n")
    if os.environ.get("XMLSEC_VERIFY_VERBOSE"):
        print("verify: " + " ".join(notes), file=sys.stderr)


def parse_time(text):
    try:
        return datetime.datetime.fromisoformat((text or "").strip().replace("Z", "+00:00"))
    except ValueError:
        raise Rejected("bad xsd:dateTime %r" % text)


def check_timestamp(ts, skew, max_age):
    now = datetime.datetime.now(datetime.timezone.utc)
    created = ts.find(q(WSU, "Created"))
    expires = ts.find(q(WSU, "Expires"))
    if created is None:
        raise Rejected("Timestamp has no Created")
    created_at = parse_time(created.text)
    if created_at > now + datetime.timedelta(seconds=skew):
        raise Rejected("Timestamp Created is in the future")
    if created_at < now - datetime.timedelta(seconds=max_age + skew):
        raise Rejected("Timestamp Created is older than %d s" % max_age)
    if expires is not None and parse_time(expires.text) <= now - datetime.timedelta(seconds=skew):
        raise Rejected("Timestamp has expired")


# --- sign -------------------------------------------------------------------------------------

def xs_datetime(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def sign(args):
    root = parse(read_input(args.input))
    soap, header, body = envelope_parts(root)
    actions = args.actions.split()
    for a in actions:
        if a not in ACTIONS:
            raise SystemExit("xmlsec_verify.py: --actions takes %s" % " ".join(ACTIONS))
    profile = PROFILES.get(args.profile, {})
    sig_alg = args.sig_alg or profile.get("sig_alg", "rsa-sha256")
    digest = args.digest or profile.get("digest", "sha256")
    key_transport = args.key_transport or profile.get("key_transport", "oaep")
    enc = args.enc or profile.get("enc", "aes256-gcm")

    # wsu and wsse declared once on the Envelope, so that Body's wsu:Id needs no declaration
    # of its own (WSS4J declares wsu on Body; receivers must cope with both). lxml cannot add
    # a declaration to an existing element: rebuild the Envelope element around its children.
    new_root = etree.Element(root.tag, attrib=dict(root.attrib),
                             nsmap=dict(root.nsmap, wsse=WSSE, wsu=WSU))
    new_root.text = root.text
    for c in list(root):
        new_root.append(c)
    root = new_root
    soap, header, body = envelope_parts(root)
    if header is None:
        header = etree.Element(q(soap, "Header"))
        root.insert(0, header)
    if "Encrypt" in actions:
        # python-xmlsec 1.3.17's encrypt_xml with Type Content makes lxml proxies for the
        # Body's first and last child nodes, and crashes (AssertionError "Unknown node type:
        # 3", or a segmentation fault) when one is text, as the newlines around a pretty
        # printed payload are. Drop whitespace directly inside the Body before signing it.
        if body.text is not None and not body.text.strip():
            body.text = None
        for c in body:
            if c.tail is not None and not c.tail.strip():
                c.tail = None
    security = etree.Element(q(WSSE, "Security"))
    security.set(q(soap, "mustUnderstand"), "1" if soap == SOAP11 else "true")
    header.insert(0, security)

    def new_id(prefix):
        return "%s-%s" % (prefix, uuid.uuid4().hex)

    stamp = None
    if "Timestamp" in actions:
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        now += datetime.timedelta(seconds=args.time_offset)
        stamp = etree.SubElement(security, q(WSU, "Timestamp"))
        stamp.set(q(WSU, "Id"), new_id("TS"))
        etree.SubElement(stamp, q(WSU, "Created")).text = xs_datetime(now)
        if args.ttl:
            etree.SubElement(stamp, q(WSU, "Expires")).text = xs_datetime(now + datetime.timedelta(seconds=args.ttl))

    if "Signature" in actions:
        signer_cert = load_cert(args.keys, args.signer)
        bst = etree.SubElement(security, q(WSSE, "BinarySecurityToken"))
        bst.set("EncodingType", BASE64)
        bst.set("ValueType", X509V3)
        bst.set(q(WSU, "Id"), new_id("X509"))
        bst.text = b64(der(signer_cert))
        body_id = body.get(q(WSU, "Id")) or new_id("Body")
        body.set(q(WSU, "Id"), body_id)

        sig = xmlsec.template.create(root, xmlsec.Transform.EXCL_C14N, SIG_ALGS[sig_alg], ns="ds")
        targets = [body_id] + ([stamp.get(q(WSU, "Id"))] if stamp is not None else [])
        for target in targets:
            ref = xmlsec.template.add_reference(sig, DIGESTS[digest], uri="#" + target)
            xmlsec.template.add_transform(ref, xmlsec.Transform.EXCL_C14N)
        ki = xmlsec.template.ensure_key_info(sig)
        str_el = etree.SubElement(ki, q(WSSE, "SecurityTokenReference"))
        r = etree.SubElement(str_el, q(WSSE, "Reference"))
        r.set("URI", "#" + bst.get(q(WSU, "Id")))
        r.set("ValueType", X509V3)
        security.append(sig)
        xmlsec.tree.add_ids(root, ["Id"])
        ctx = xmlsec.SignatureContext()
        ctx.key = xmlsec.Key.from_file(key_path(args.keys, args.signer, ".key"), xmlsec.KeyFormat.PEM)
        ctx.sign(sig)

    if "Encrypt" in actions:
        recipient_cert = load_cert(args.keys, args.recipient)
        if ski(recipient_cert) is None:
            raise Rejected("%s.pem has no SubjectKeyIdentifier" % args.recipient)
        cipher, bits = CIPHERS[enc]
        ed_id, ek_id = new_id("ED"), new_id("EK")
        enc_data = xmlsec.template.encrypted_data_create(
            root, cipher, type=xmlsec.EncryptionType.CONTENT, ns="xenc", id=ed_id)
        xmlsec.template.encrypted_data_ensure_cipher_value(enc_data)
        ki = xmlsec.template.encrypted_data_ensure_key_info(enc_data, ns="ds")
        ek = xmlsec.template.add_encrypted_key(ki, KEY_TRANSPORTS[key_transport])
        xmlsec.template.encrypted_data_ensure_cipher_value(ek)
        manager = xmlsec.KeysManager()
        manager.add_key(xmlsec.Key.from_file(key_path(args.keys, args.recipient, ".pem"), xmlsec.KeyFormat.CERT_PEM))
        ctx = xmlsec.EncryptionContext(manager)
        ctx.key = xmlsec.Key.generate(xmlsec.KeyData.AES, bits, xmlsec.KeyDataType.SESSION)
        enc_data = ctx.encrypt_xml(enc_data, body)

        # libxmlsec nests the EncryptedKey in EncryptedData/KeyInfo; WS-Security wants it in
        # the header, naming the recipient and listing what it encrypts, and the
        # EncryptedData pointing back at it.
        ki = child(enc_data, DS, "KeyInfo")
        ek = child(ki, XENC, "EncryptedKey")
        ki.remove(ek)
        ek.set("Id", ek_id)
        ek_ki = etree.Element(q(DS, "KeyInfo"), nsmap={"ds": DS})
        ek_str = etree.SubElement(ek_ki, q(WSSE, "SecurityTokenReference"))
        kid = etree.SubElement(ek_str, q(WSSE, "KeyIdentifier"))
        kid.set("EncodingType", BASE64)
        kid.set("ValueType", SKI)
        kid.text = b64(ski(recipient_cert))
        child(ek, XENC, "EncryptionMethod").addnext(ek_ki)
        reflist = etree.SubElement(ek, q(XENC, "ReferenceList"))
        etree.SubElement(reflist, q(XENC, "DataReference")).set("URI", "#" + ed_id)
        ed_str = etree.SubElement(ki, q(WSSE, "SecurityTokenReference"), nsmap={"wsse11": WSSE11})
        ed_str.set(q(WSSE11, "TokenType"), ENCRYPTED_KEY_TOKEN)
        etree.SubElement(ed_str, q(WSSE, "Reference")).set("URI", "#" + ek_id)
        # Receivers that process the header in order must decrypt before verifying.
        if stamp is not None:
            stamp.addnext(ek)
        else:
            security.insert(0, ek)

    data = etree.tostring(root)
    if args.out in (None, "-"):
        sys.stdout.buffer.write(data)
    else:
        with open(args.out, "wb") as f:
            f.write(data)


def main(argv=None):
    p = argparse.ArgumentParser(prog="xmlsec_verify.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    default_keys = os.environ.get("BUSBAR_INTEROP_KEYS")

    v = sub.add_parser("verify", help="decrypt and verify a secured message")
    v.add_argument("--keys", default=default_keys, required=default_keys is None)
    v.add_argument("--recipient", default="client", help="whose key decrypts (NAME.key)")
    v.add_argument("--signer", action="append",
                   help="certificates that SKI/thumbprint/issuer-serial references may name "
                        "(default: server and server3072)")
    v.add_argument("--require", default="Timestamp Signature Encrypt")
    v.add_argument("--print", choices=("body", "envelope", "none"), default="body")
    v.add_argument("--ttl-skew", type=int, default=60, help="clock skew allowed, seconds")
    v.add_argument("--max-age", type=int, default=300, help="oldest acceptable Created, seconds")
    v.add_argument("input", nargs="?", default="-")

    s = sub.add_parser("sign", help="secure a plain SOAP message as a client")
    s.add_argument("--keys", default=default_keys, required=default_keys is None)
    s.add_argument("--signer", default="client")
    s.add_argument("--recipient", default="server")
    s.add_argument("--actions", default="Timestamp Signature Encrypt")
    s.add_argument("--profile", choices=sorted(PROFILES))
    s.add_argument("--sig-alg", choices=sorted(SIG_ALGS))
    s.add_argument("--digest", choices=sorted(DIGESTS))
    s.add_argument("--key-transport", choices=sorted(KEY_TRANSPORTS))
    s.add_argument("--enc", choices=sorted(CIPHERS))
    s.add_argument("--ttl", type=int, default=300, help="Expires - Created, seconds; 0: no Expires")
    s.add_argument("--time-offset", type=int, default=0, help="shift Created by this many seconds")
    s.add_argument("--out", default="-")
    s.add_argument("input", nargs="?", default="-")

    args = p.parse_args(argv)
    try:
        if args.command == "verify":
            if not args.signer:
                args.signer = [n for n in ("server", "server3072")
                               if os.path.isfile(os.path.join(args.keys, n + ".pem"))]
            verify(args)
        else:
            sign(args)
    except (Rejected, xmlsec.Error, OSError) as e:
        print("%s failed: %s" % (args.command, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
