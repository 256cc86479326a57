# JsonTransform: the order document mapped to a flat 20-field document (docs/integrator.md).
# Money is rounded to cents, halves up: floor(x * 100 + 0.5) / 100.
def cents: (. * 100 + 0.5 | floor) / 100;

(reduce .items[] as $i (0; . + $i.qty * $i.unitPrice) | cents) as $total
| ({gold: 0.1, silver: 0.05}[.customer.tier] // 0) as $rate
| (($total * $rate) | cents) as $discount
| (.orderDate | split("T")[0] | split("-")) as $date
| {
    orderId: .orderId,
    customerId: .customer.id,
    customerNumber: (.customer.id | ltrimstr("C-") | tonumber),
    fullName: "\(.customer.firstName) \(.customer.lastName)",
    email: (.customer.email | ascii_downcase),
    tier: .customer.tier,
    addressLine: .customer.address.line1,
    city: .customer.address.city,
    zip: .customer.address.zip,
    country: .customer.address.country,
    currency: .currency,
    orderDate: "\($date[2])/\($date[1])/\($date[0])",
    itemCount: (.items | length),
    itemCountText: (.items | length | tostring),
    totalQuantity: (reduce .items[] as $i (0; . + $i.qty)),
    total: $total,
    discountRate: $rate,
    discount: $discount,
    net: (($total - $discount) | cents),
    source: "busbar"
  }
