# JsonMap: the order list mapped to one item per order, in order (docs/integrator.md).
# Rounding is to the nearest integer with halves to even (2.5 → 2, 3.5 → 4).
def round_half_even:
  floor as $f
  | (. - $f) as $d
  | if $d > 0.5 then $f + 1
    elif $d < 0.5 then $f
    elif ($f % 2) == 0 then $f
    else $f + 1
    end;

[ .payload.order[]
  | { symbol: .symbol,
      purchaser: .buyerID,
      quantity: (.volume * 2),
      totalCost: (.price * .volume),
      roundedPrice: (.price | round_half_even) } ]
