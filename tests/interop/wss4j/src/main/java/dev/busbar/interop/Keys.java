package dev.busbar.interop;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.HashMap;
import java.util.Map;

import org.apache.wss4j.common.crypto.Merlin;

/**
 * The key directory written by tests/interop/keys.sh: NAME.pem (certificate), NAME.p12
 * (key and certificate, alias NAME, password NAME-pass) and ca.pem (the trust anchor).
 * Stores are cached, so a batch run reads each file once.
 */
final class Keys {
    private final Path dir;
    private final Map<String, KeyStore> keyStores = new HashMap<>();
    private final Map<String, X509Certificate> certs = new HashMap<>();

    Keys(Path dir) {
        this.dir = dir;
    }

    Path dir() {
        return dir;
    }

    static String password(String name) {
        return name + "-pass";
    }

    synchronized X509Certificate cert(String name) throws IOException, GeneralSecurityException {
        X509Certificate cert = certs.get(name);
        if (cert == null) {
            Path file = file(name + ".pem");
            try (InputStream in = Files.newInputStream(file)) {
                cert = (X509Certificate) CertificateFactory.getInstance("X.509").generateCertificate(in);
            }
            certs.put(name, cert);
        }
        return cert;
    }

    /** NAME.p12 as a key store holding NAME's private key. */
    synchronized KeyStore keyStore(String name) throws IOException, GeneralSecurityException {
        KeyStore ks = keyStores.get(name);
        if (ks == null) {
            Path file = file(name + ".p12");
            ks = KeyStore.getInstance("PKCS12");
            try (InputStream in = Files.newInputStream(file)) {
                ks.load(in, password(name).toCharArray());
            }
            if (!ks.isKeyEntry(name)) {
                throw new GeneralSecurityException(file + " has no key entry with alias " + name);
            }
            keyStores.put(name, ks);
        }
        return ks;
    }

    /** An in-memory store of trusted certificates, each under its file's base name. */
    KeyStore certStore(Iterable<String> names) throws IOException, GeneralSecurityException {
        KeyStore ks = KeyStore.getInstance("PKCS12");
        ks.load(null, null);
        for (String name : names) {
            if (Files.exists(dir.resolve(name + ".pem"))) {
                ks.setCertificateEntry(name, cert(name));
            }
        }
        return ks;
    }

    /** A crypto that signs or decrypts with NAME's key (and trusts the given certificates). */
    Merlin privateCrypto(String name, Iterable<String> trusted)
            throws IOException, GeneralSecurityException {
        Merlin crypto = new Merlin();
        crypto.setKeyStore(keyStore(name));
        if (trusted != null) {
            crypto.setTrustStore(certStore(trusted));
        }
        return crypto;
    }

    /** A crypto that only knows certificates: encryption recipients, trust anchors. */
    Merlin certCrypto(Iterable<String> names) throws IOException, GeneralSecurityException {
        Merlin crypto = new Merlin();
        crypto.setTrustStore(certStore(names));
        return crypto;
    }

    private Path file(String name) throws IOException {
        Path file = dir.resolve(name);
        if (!Files.isRegularFile(file)) {
            throw new IOException("no " + file + " (run tests/interop/keys.sh " + dir + ")");
        }
        return file;
    }
}
