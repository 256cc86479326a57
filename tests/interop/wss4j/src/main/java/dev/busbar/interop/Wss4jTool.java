package dev.busbar.interop;

import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.wss4j.common.ext.WSSecurityException;
import org.w3c.dom.Document;

/**
 * Apache WSS4J as a command-line WS-Security peer.
 *
 * <pre>
 * Wss4jTool secure [options] [--in FILE] [--out FILE]   secure a plain SOAP message as a WSS4J client would
 * Wss4jTool verify [options] [--in FILE] [--out FILE]   check a secured message, print its decrypted Body
 * Wss4jTool batch FILE|-                                run many secure/verify jobs in one JVM
 * </pre>
 *
 * Exit status: 0 success, 1 rejected or failed, 2 wrong command line.
 */
public final class Wss4jTool {
    private static final String USAGE = String.join("\n",
        "usage: Wss4jTool secure [options] [--in FILE] [--out FILE]",
        "       Wss4jTool verify [options] [--in FILE] [--out FILE]",
        "       Wss4jTool batch FILE|-",
        "common: --keys DIR (default $BUSBAR_INTEROP_KEYS)",
        "secure: --actions 'Timestamp Signature Encrypt UsernameToken' --soap 11|12",
        "        --profile legacy|modern --signer NAME --recipient NAME",
        "        --ttl SECONDS (0: no Expires) --time-offset SECONDS (shifts Created)",
        "        --sig-key-id DirectReference|IssuerSerial|SKIKeyIdentifier|Thumbprint|X509KeyIdentifier",
        "        --sig-alg rsa-sha1|rsa-sha256 --digest sha1|sha256 --sign-parts PARTS",
        "        --enc-key-id SKIKeyIdentifier|IssuerSerial|DirectReference|Thumbprint|X509KeyIdentifier",
        "        --key-transport rsa15|oaep --enc aes128-cbc|aes256-cbc|aes128-gcm|aes256-gcm",
        "        --enc-parts PARTS --user NAME --password PW --pw-type text|digest",
        "        --must-understand true|false",
        "verify: --require 'Timestamp Signature Encrypt' --recipient NAME --expect-signer NAME",
        "        --print body|envelope|none --ttl SECONDS --bsp true|false",
        "        --user NAME --password PW (the account a UsernameToken must match)",
        "batch:  one job per line: secure|verify OPTIONS --in FILE --out FILE; '#' comments;",
        "        prints 'LINE ok SUMMARY' or 'LINE fail REASON' per job");

    private final Map<Path, Keys> keyDirs = new HashMap<>();

    private Wss4jTool() {}

    public static void main(String[] argv) {
        // WSS4J logs a warning for every rejected message; the reason is printed anyway.
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel",
            System.getenv().getOrDefault("WSS4J_TOOL_LOG", "error"));
        System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
        Wss4jTool tool = new Wss4jTool();
        int status;
        try {
            status = tool.main(Arrays.asList(argv));
        } catch (Args.UsageException e) {
            System.err.println("Wss4jTool: " + e.getMessage());
            System.err.println(USAGE);
            status = 2;
        }
        System.out.flush();
        System.exit(status);
    }

    private int main(List<String> argv) throws Args.UsageException {
        if (argv.isEmpty()) {
            throw new Args.UsageException("no command");
        }
        String command = argv.get(0);
        List<String> rest = argv.subList(1, argv.size());
        switch (command) {
            case "secure":
            case "verify":
                return single(command, rest);
            case "batch":
                if (rest.size() != 1) {
                    throw new Args.UsageException("batch takes one file ('-' for standard input)");
                }
                return batch(rest.get(0));
            case "-h":
            case "--help":
            case "help":
                System.out.println(USAGE);
                return 0;
            default:
                throw new Args.UsageException("unknown command " + command);
        }
    }

    private int single(String command, List<String> argv) throws Args.UsageException {
        Args args = Args.parse(argv, "secure".equals(command) ? Secure.OPTIONS : Verify.OPTIONS);
        try {
            Result r = job(command, args);
            if (!r.summary.isEmpty() && System.getenv("WSS4J_TOOL_VERBOSE") != null) {
                System.err.println(command + ": " + r.summary);
            }
            return 0;
        } catch (Args.UsageException e) {
            throw e;
        } catch (Exception | LinkageError e) {
            // LinkageError: e.g. a SAML token, whose OpenSAML classes are not on the class path.
            System.err.println(command + " failed: " + reason(e));
            if (System.getenv("WSS4J_TOOL_VERBOSE") != null) {
                e.printStackTrace();
            }
            return 1;
        }
    }

    private int batch(String file) throws Args.UsageException {
        List<String> lines;
        try {
            lines = "-".equals(file)
                ? Arrays.asList(new String(System.in.readAllBytes(), StandardCharsets.UTF_8).split("\n"))
                : Files.readAllLines(Paths.get(file), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new Args.UsageException("cannot read " + file + ": " + e.getMessage());
        }
        PrintStream out = System.out;
        int failed = 0;
        for (int i = 0; i < lines.size(); i++) {
            String line = lines.get(i).trim();
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            int n = i + 1;
            try {
                List<String> words = Args.split(line);
                String command = words.get(0);
                if (!"secure".equals(command) && !"verify".equals(command)) {
                    throw new Args.UsageException("unknown command " + command);
                }
                Args args = Args.parse(words.subList(1, words.size()),
                    "secure".equals(command) ? Secure.OPTIONS : Verify.OPTIONS);
                if (!args.has("in")) {
                    throw new Args.UsageException("batch jobs need --in");
                }
                Result r = job(command, args);
                out.println(n + " ok" + (r.summary.isEmpty() ? "" : " " + r.summary));
            } catch (Exception | LinkageError e) {
                failed++;
                out.println(n + " fail " + reason(e));
            }
            out.flush();
        }
        return failed == 0 ? 0 : 1;
    }

    private static final class Result {
        final String summary;

        Result(String summary) {
            this.summary = summary;
        }
    }

    /** Runs one secure or verify job; writes its output to --out, or to stdout outside batch. */
    private Result job(String command, Args args) throws Exception {
        Keys keys = keys(args);
        String out = args.get("out");
        if (out != null && !"-".equals(out)) {
            // A failed job must not leave an earlier run's result behind.
            Files.deleteIfExists(Paths.get(out));
        }
        byte[] input = read(args.get("in"));
        Document doc = Xml.parse(input);
        byte[] output;
        String summary = "";
        if ("secure".equals(command)) {
            output = Xml.write(Secure.run(args, keys, doc));
        } else {
            Verify.Outcome o = Verify.run(args, keys, doc);
            output = o.output;
            summary = o.summary;
        }
        if (out == null || "-".equals(out)) {
            System.out.write(output);
            if (output.length > 0 && output[output.length - 1] != '\n' && "verify".equals(command)) {
                System.out.write('\n');
            }
            System.out.flush();
        } else {
            Path p = Paths.get(out);
            Path tmp = p.resolveSibling(p.getFileName() + ".tmp");
            Files.write(tmp, output);
            Files.move(tmp, p, java.nio.file.StandardCopyOption.REPLACE_EXISTING,
                       java.nio.file.StandardCopyOption.ATOMIC_MOVE);
        }
        return new Result(summary);
    }

    private Keys keys(Args args) throws Args.UsageException {
        String dir = args.get("keys", System.getenv("BUSBAR_INTEROP_KEYS"));
        if (dir == null) {
            throw new Args.UsageException("--keys DIR is required (or set BUSBAR_INTEROP_KEYS)");
        }
        Path p = Paths.get(dir).toAbsolutePath().normalize();
        return keyDirs.computeIfAbsent(p, Keys::new);
    }

    private static byte[] read(String in) throws IOException {
        if (in == null || "-".equals(in)) {
            return System.in.readAllBytes();
        }
        try (InputStream s = Files.newInputStream(Paths.get(in))) {
            return s.readAllBytes();
        }
    }

    /** One line: the exception chain's messages, WSS4J's error code first. */
    static String reason(Throwable e) {
        List<String> parts = new ArrayList<>();
        for (Throwable t = e; t != null && parts.size() < 4; t = t.getCause()) {
            String msg = t.getMessage();
            if (t instanceof WSSecurityException) {
                WSSecurityException w = (WSSecurityException) t;
                msg = "[" + w.getErrorCode() + "] " + msg;
            } else if (msg == null) {
                msg = t.getClass().getSimpleName();
            } else if (!(t instanceof Verify.PolicyException) && t.getClass() != IOException.class) {
                msg = t.getClass().getSimpleName() + ": " + msg;
            }
            if (parts.isEmpty() || !parts.get(parts.size() - 1).contains(msg)) {
                parts.add(msg);
            }
            if (t.getCause() == t) {
                break;
            }
        }
        return String.join(": ", parts).replaceAll("\\s+", " ").trim();
    }
}
