package dev.busbar.interop;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/** `--name value` options of one command; every option takes exactly one value. */
final class Args {
    private final Map<String, String> values = new LinkedHashMap<>();

    static Args parse(List<String> argv, Set<String> known) throws UsageException {
        Args args = new Args();
        for (int i = 0; i < argv.size(); i++) {
            String name = argv.get(i);
            if (!name.startsWith("--")) {
                throw new UsageException("unexpected argument '" + name + "'");
            }
            String key = name.substring(2);
            if (!known.contains(key)) {
                throw new UsageException("unknown option " + name);
            }
            if (i + 1 >= argv.size()) {
                throw new UsageException(name + " needs a value");
            }
            if (args.values.put(key, argv.get(++i)) != null) {
                throw new UsageException(name + " given twice");
            }
        }
        return args;
    }

    String get(String key) {
        return values.get(key);
    }

    String get(String key, String fallback) {
        return values.getOrDefault(key, fallback);
    }

    boolean has(String key) {
        return values.containsKey(key);
    }

    /** One of the allowed values, or null when the option is absent. */
    String choice(String key, Map<String, String> allowed) throws UsageException {
        String v = values.get(key);
        if (v == null) {
            return null;
        }
        String mapped = allowed.get(v);
        if (mapped == null) {
            throw new UsageException("--" + key + " must be one of " + allowed.keySet() + ", not '" + v + "'");
        }
        return mapped;
    }

    int integer(String key, int fallback) throws UsageException {
        String v = values.get(key);
        if (v == null) {
            return fallback;
        }
        try {
            return Integer.parseInt(v);
        } catch (NumberFormatException e) {
            throw new UsageException("--" + key + " must be an integer, not '" + v + "'");
        }
    }

    /**
     * Splits one batch line into words: blanks separate words, '...' and "..." quote,
     * a backslash escapes the next character outside single quotes.
     */
    static List<String> split(String line) throws UsageException {
        List<String> words = new ArrayList<>();
        StringBuilder word = new StringBuilder();
        boolean inWord = false;
        char quote = 0;
        for (int i = 0; i < line.length(); i++) {
            char c = line.charAt(i);
            if (quote == '\'') {
                if (c == '\'') {
                    quote = 0;
                } else {
                    word.append(c);
                }
            } else if (c == '\\') {
                if (++i >= line.length()) {
                    throw new UsageException("line ends with a backslash");
                }
                word.append(line.charAt(i));
                inWord = true;
            } else if (quote == '"') {
                if (c == '"') {
                    quote = 0;
                } else {
                    word.append(c);
                }
            } else if (c == '\'' || c == '"') {
                quote = c;
                inWord = true;
            } else if (Character.isWhitespace(c)) {
                if (inWord) {
                    words.add(word.toString());
                    word.setLength(0);
                    inWord = false;
                }
            } else {
                word.append(c);
                inWord = true;
            }
        }
        if (quote != 0) {
            throw new UsageException("unbalanced " + quote);
        }
        if (inWord) {
            words.add(word.toString());
        }
        return words;
    }

    /** A wrong command line: reported with the usage text, exit status 2. */
    static final class UsageException extends Exception {
        private static final long serialVersionUID = 1L;

        UsageException(String message) {
            super(message);
        }
    }
}
