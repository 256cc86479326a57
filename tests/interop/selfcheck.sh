#!/usr/bin/env bash
# Proves the interop harness without busbar: WSS4J and python-xmlsec secure, verify and
# reject each other's messages for every variant the busbar tests use.
#
#   tests/interop/selfcheck.sh        (runs tests/interop/setup.sh first; it is a no-op
#                                      when everything is built)
#
# Work files: target/interop/selfcheck/ (kept for inspection). Keys: target/interop/keys/.
# Ends with "N passed, N failed"; exit status 1 when anything failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
start=$(date +%s%N)

"$here/setup.sh"
keys=$root/target/interop/keys
"$here/keys.sh" "$keys"
wss4j=$root/target/interop/wss4j/wss4j-tool
py=$root/target/interop/venv/bin/python
xmlsec_tool=$here/xmlsec_verify.py

work=$root/target/interop/selfcheck
rm -rf "$work"
mkdir -p "$work"
cd "$work"

# The benchmark's buyStocks request (one order; docs/scenarios.md), SOAP 1.1.
body='<m:buyStocks xmlns:m="http://services.samples/xsd"><order><symbol>IBM</symbol><buyerID>asankha</buyerID><price>140.34</price><volume>200</volume></order></m:buyStocks>'
printf '%s' "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Header><routing xmlns=\"http://someuri\">xadmin;server1;community#1.0##</routing></soapenv:Header><soapenv:Body>$body</soapenv:Body></soapenv:Envelope>" >plain.xml

passed=0
failed=0
pass() { passed=$((passed + 1)); }
fail() {
  failed=$((failed + 1))
  echo "FAIL $*" >&2
}

# --- python-xmlsec as a request producer (verified below by WSS4J and by itself) ------------
for p in legacy modern; do
  "$py" "$xmlsec_tool" sign --keys "$keys" --profile "$p" --out "py-$p.xml" plain.xml
done

# --- one WSS4J batch: requests (client -> server) and responses (server -> client) ----------
# Each job: "expect-ok|expect-fail <name> <secure|verify args>"; the batch gets the args.
jobs=()
expect=()
names=()
job() {
  expect+=("$1")
  names+=("$2")
  shift 2
  jobs+=("$*")
}
request() { # NAME SECURE-ARGS...  -> secure for server, verify as server
  local name=$1
  shift
  job ok "$name/secure" secure --keys "$keys" "$@" --in plain.xml --out "req-$name.xml"
  job ok "$name/verify" verify --keys "$keys" --recipient "${recipient:-server}" \
    --expect-signer "${signer:-client}" ${require:+--require "'$require'"} ${utcreds:+"$utcreds"} \
    --in "req-$name.xml" --out "req-$name.out"
}

request legacy --profile legacy
request modern --profile modern
signer=client3072 recipient=server3072 request modern3072 --profile modern --signer client3072 --recipient server3072
request bst-ski --sig-key-id DirectReference --enc-key-id SKIKeyIdentifier
request issuerserial --sig-key-id IssuerSerial --enc-key-id IssuerSerial
request ski-bst --sig-key-id SKIKeyIdentifier --enc-key-id DirectReference
request thumbprint --sig-key-id Thumbprint --enc-key-id Thumbprint
request x509 --sig-key-id X509KeyIdentifier --enc-key-id X509KeyIdentifier
request soap12-legacy --soap 12 --profile legacy
request soap12-modern --soap 12 --profile modern
request aes128-gcm --enc aes128-gcm --sig-alg rsa-sha256 --digest sha256
request aes256-cbc --enc aes256-cbc --key-transport rsa15
require="UsernameToken Timestamp Signature Encrypt" utcreds="--user alice --password s3cret" \
  request ut-text --actions "'UsernameToken Timestamp Signature Encrypt'" --user alice --password s3cret --pw-type text
require="UsernameToken Timestamp Signature Encrypt" utcreds="--user alice --password s3cret" \
  request ut-digest --actions "'UsernameToken Timestamp Signature Encrypt'" --user alice --password s3cret --pw-type digest

# Requests WSS4J must refuse.
for bad in rogue expired untrusted; do
  job ok "$bad/secure" secure --keys "$keys" --signer "$bad" --in plain.xml --out "bad-$bad.xml"
  job fail "$bad/verify-rejects" verify --keys "$keys" --recipient server --in "bad-$bad.xml"
done
job ok "tsonly/secure" secure --keys "$keys" --sign-parts Timestamp --in plain.xml --out bad-tsonly.xml
job fail "tsonly/verify-rejects" verify --keys "$keys" --recipient server --in bad-tsonly.xml
job ok "noenc/secure" secure --keys "$keys" --actions "'Timestamp Signature'" --in plain.xml --out bad-noenc.xml
job fail "noenc/verify-rejects" verify --keys "$keys" --recipient server --in bad-noenc.xml
job fail "otherrecipient/verify-rejects" verify --keys "$keys" --recipient client --in req-legacy.xml
job ok "ut-wrongpw/secure" secure --keys "$keys" --actions UsernameToken --user alice --password nope --in plain.xml --out bad-ut.xml
job fail "ut-wrongpw/verify-rejects" verify --keys "$keys" --require UsernameToken --user alice --password s3cret --in bad-ut.xml

job ok "stale/secure" secure --keys "$keys" --time-offset -900 --in plain.xml --out bad-stale.xml
job fail "stale/verify-rejects" verify --keys "$keys" --recipient server --in bad-stale.xml
job ok "future/secure" secure --keys "$keys" --time-offset 900 --in plain.xml --out bad-future.xml
job fail "future/verify-rejects" verify --keys "$keys" --recipient server --in bad-future.xml

# Responses: the service's key signs, the client's certificate receives.
responses=()
response() { # NAME SECURE-ARGS...
  local name=$1
  shift
  responses+=("$name")
  job ok "resp-$name/secure" secure --keys "$keys" --signer "${signer:-server}" --recipient "${recipient:-client}" "$@" --in plain.xml --out "resp-$name.xml"
  job ok "resp-$name/verify" verify --keys "$keys" --recipient "${recipient:-client}" --expect-signer "${signer:-server}" --in "resp-$name.xml" --out "resp-$name.out"
}
response legacy --profile legacy
response modern --profile modern
signer=server3072 recipient=client3072 response modern3072 --profile modern
response issuerserial --sig-key-id IssuerSerial --enc-key-id IssuerSerial
response ski --sig-key-id SKIKeyIdentifier --enc-key-id SKIKeyIdentifier
response thumbprint --sig-key-id Thumbprint --enc-key-id Thumbprint
response soap12 --soap 12 --profile modern

# python-xmlsec's requests, verified by WSS4J.
for p in legacy modern; do
  job ok "py-$p/wss4j-verify" verify --keys "$keys" --recipient server --expect-signer client --in "py-$p.xml" --out "py-$p.wss4j.out"
done

printf '%s\n' "${jobs[@]}" >jobs.txt
set +e
"$wss4j" batch jobs.txt >batch.out 2>batch.err
set -e
declare -A status reason
while read -r n st rest; do
  status[$n]=$st
  reason[$n]=$rest
done <batch.out
for i in "${!jobs[@]}"; do
  n=$((i + 1))
  st=${status[$n]:-missing}
  if [[ "$st" == "${expect[$i]}" ]]; then
    pass
  else
    fail "wss4j ${names[$i]}: expected ${expect[$i]}, got $st ${reason[$n]:-} (jobs.txt line $n)"
  fi
done

check_body() { # LABEL FILE
  if [[ -f "$2" && "$(tr -d '\n' <"$2")" == "$body" ]]; then
    pass
  else
    fail "$1: decrypted body differs from the original ($2)"
  fi
}
for f in req-*.out; do
  check_body "wss4j ${f%.out}" "$f"
done
for name in "${responses[@]}"; do
  check_body "wss4j resp-$name" "resp-$name.out"
done
for p in legacy modern; do
  check_body "wss4j py-$p" "py-$p.wss4j.out"
done

# --- python-xmlsec verifies the responses and its own requests ------------------------------
pyverify() { # EXPECT LABEL ARGS...
  local want=$1 label=$2 got
  shift 2
  if "$py" "$xmlsec_tool" verify --keys "$keys" "$@" >"$label.pyout" 2>"$label.pyerr"; then got=ok; else got=fail; fi
  if [[ "$got" != "$want" ]]; then
    fail "xmlsec $label: expected $want, got $got: $(cat "$label.pyerr")"
  elif [[ "$want" == ok ]]; then
    check_body "xmlsec $label" "$label.pyout"
  else
    pass
  fi
}
for name in "${responses[@]}"; do
  if [[ "$name" == modern3072 ]]; then
    pyverify ok "resp-$name" --recipient client3072 "resp-$name.xml"
  else
    pyverify ok "resp-$name" "resp-$name.xml"
  fi
done
for p in legacy modern; do
  pyverify ok "py-$p" --recipient server --signer client "py-$p.xml"
done
pyverify fail "resp-not-for-server" --recipient server "resp-legacy.xml"
for bad in rogue expired untrusted; do
  # These were encrypted for the server and signed by a bad client key.
  pyverify fail "bad-$bad" --recipient server --signer client "bad-$bad.xml"
done
pyverify fail "bad-tsonly" --recipient server --signer client bad-tsonly.xml
pyverify fail "bad-stale" --recipient server --signer client bad-stale.xml
pyverify fail "bad-future" --recipient server --signer client bad-future.xml
pyverify fail "bad-noenc" --recipient server --signer client bad-noenc.xml
perl -pe 's/(<ds:SignatureValue>)(.)/$1.($2 eq "A" ? "B" : "A")/e' resp-legacy.xml >bad-sigvalue.xml
pyverify fail "bad-sigvalue" bad-sigvalue.xml

elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "interop selfcheck: ${#jobs[@]} WSS4J jobs in one JVM, work files in $work, $((elapsed_ms / 1000)).$((elapsed_ms % 1000 / 100)) s" >&2
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
