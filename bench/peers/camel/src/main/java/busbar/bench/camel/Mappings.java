package busbar.bench.camel;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.camel.Exchange;

/**
 * What the Jolt specs (src/main/resources/jolt/) leave to Java: Jolt's modify functions have
 * no multiplication, no floor and no rounding to even, and its output keeps the input's member
 * order. Each method takes Jolt's hydrated output (maps and lists) and returns the document
 * of docs/integrator.md, members in its order.
 */
final class Mappings {
    private Mappings() {
    }

    /** Money rounded to cents, halves up, in this order of operations (docs/integrator.md). */
    static double cents(double x) {
        return Math.floor(x * 100 + 0.5) / 100;
    }

    static boolean integral(Object n) {
        return n instanceof Integer || n instanceof Long;
    }

    static Number number(Object v, String what) {
        if (v instanceof Number n) {
            return n;
        }
        throw new Json.BadRequest("'" + what + "' is not a number");
    }

    /** a × b with JSON's types: two integers give an integer, anything else a double. */
    static Number times(Number a, Number b) {
        if (integral(a) && integral(b)) {
            return Math.multiplyExact(a.longValue(), b.longValue());
        }
        return a.doubleValue() * b.doubleValue();
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> object(Object v, String what) {
        if (v instanceof Map<?, ?> m) {
            return (Map<String, Object>) m;
        }
        throw new Json.BadRequest("'" + what + "' is not an object");
    }

    /**
     * JsonMap. Jolt has renamed buyerID to purchaser and kept price and volume; quantity,
     * totalCost and roundedPrice are computed here.
     */
    static void finishMap(Exchange exchange) {
        Object jolt = exchange.getMessage().getBody();
        List<Object> out = new ArrayList<>();
        if (jolt instanceof List<?> orders) {
            for (Object o : orders) {
                Map<String, Object> order = object(o, "order");
                Number price = number(order.get("price"), "price");
                Number volume = number(order.get("volume"), "volume");
                Map<String, Object> item = new LinkedHashMap<>();
                item.put("symbol", order.get("symbol"));
                item.put("purchaser", order.get("purchaser"));
                item.put("quantity", times(volume, 2));
                item.put("totalCost", times(price, volume));
                // Math.rint rounds halves to even: 2.5 → 2, 3.5 → 4.
                item.put("roundedPrice", integral(price) ? price : (long) Math.rint(price.doubleValue()));
                out.add(item);
            }
        } else if (jolt != null) {
            throw new Json.BadRequest("'payload.order' is not a list");
        }
        exchange.getMessage().setBody(out);
    }

    /**
     * JsonTransform. Jolt has moved and renamed the fields, joined the name, lowered the
     * e-mail, cut the customer number and the date, counted the items, summed the quantities
     * and chosen the discount rate; the money (Σ qty × unitPrice and the cents) is computed
     * here.
     */
    static void finishTransform(Exchange exchange) {
        Map<String, Object> j = object(exchange.getMessage().getBody(), "the document");
        double total = 0;
        Object items = j.get("items");
        if (items instanceof List<?> list) {
            for (Object i : list) {
                Map<String, Object> item = object(i, "item");
                total = total + number(item.get("qty"), "qty").doubleValue()
                        * number(item.get("unitPrice"), "unitPrice").doubleValue();
            }
        }
        total = cents(total);
        Number rate = number(j.get("discountRate"), "discountRate");
        double discount = cents(total * rate.doubleValue());

        Map<String, Object> out = new LinkedHashMap<>();
        for (String k : new String[] {"orderId", "customerId", "customerNumber", "fullName", "email",
                "tier", "addressLine", "city", "zip", "country", "currency", "orderDate", "itemCount",
                "itemCountText", "totalQuantity"}) {
            out.put(k, j.get(k));
        }
        out.put("total", total);
        out.put("discountRate", rate);
        out.put("discount", discount);
        out.put("net", cents(total - discount));
        out.put("source", "busbar");
        exchange.getMessage().setBody(out);
    }

    /** JsonCBRFilter's decision: is the first GOOG price the number 42.8? */
    static boolean firstIs428(Exchange exchange) {
        Object prices = exchange.getProperty(JsonRoutes.PRICES);
        return prices instanceof List<?> l && !l.isEmpty() && l.get(0) instanceof Number n
                && n.doubleValue() == 42.8;
    }
}
