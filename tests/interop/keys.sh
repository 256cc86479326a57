#!/usr/bin/env bash
# Generates the WS-Security test keys into OUTDIR with openssl. Nothing here is secret and
# nothing is committed: every run on a fresh directory makes new keys.
#
#   tests/interop/keys.sh OUTDIR [--force]
#
# Idempotent: a complete OUTDIR (marked by OUTDIR/.complete) is left as it is unless --force.
# Safe to call from parallel tests: generation is serialised with flock on OUTDIR/.lock.
#
# Layout (every NAME.p12 holds NAME.key + NAME.pem + its issuer, alias NAME,
# password NAME-pass):
#   ca.pem ca.key                     test CA        CN=busbar test CA,O=busbar test
#   client.{pem,key,p12}              RSA-2048       CN=client,O=busbar test   (by ca)
#   server.{pem,key,p12}              RSA-2048       CN=server,O=busbar test   (by ca)
#   client3072.{pem,key,p12}          RSA-3072       CN=client,O=busbar test   (by ca)
#   server3072.{pem,key,p12}          RSA-3072       CN=server,O=busbar test   (by ca)
#   rogue.{pem,key,p12}               self-signed, client's DN, another key
#   expired.{pem,key,p12}             client's DN, by ca, valid 2020-01-01 .. 2021-01-01
#   other-ca.pem other-ca.key         another CA     CN=busbar other CA,O=busbar test
#   untrusted.{pem,key,p12}           client's DN, by other-ca
#   truststore.p12                    ca.pem as a trusted entry (alias ca, password
#                                     trust-pass); only when keytool is on PATH
# Keys (*.key) are unencrypted PKCS#8 PEM. Leaf certificates carry SubjectKeyIdentifier,
# AuthorityKeyIdentifier, basicConstraints CA:FALSE and keyUsage digitalSignature,
# keyEncipherment, dataEncipherment.
set -euo pipefail

if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: $0 OUTDIR [--force]" >&2
  exit 2
fi
out=$1
force=${2:-}
# Bump when the layout changes so that old directories are regenerated.
version="busbar-interop-keys 1"

mkdir -p "$out"
out=$(cd "$out" && pwd)

if command -v flock >/dev/null 2>&1; then
  exec 9>"$out/.lock"
  flock 9
fi

if [[ "$force" != "--force" && -f "$out/.complete" && "$(cat "$out/.complete")" == "$version" ]]; then
  exit 0
fi
rm -f "$out/.complete"

work=$(mktemp -d "$out/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

cat >openssl.cnf <<'EOF'
[ req ]
distinguished_name = req_dn
prompt = no
[ req_dn ]
CN = unused
[ ca_ext ]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[ leaf_ext ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment, dataEncipherment
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[ self_ext ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment, dataEncipherment
subjectKeyIdentifier = hash
# Only for the expired certificate: `openssl ca` is the one openssl 3.0 command that can
# set an arbitrary notBefore.
[ ca ]
default_ca = past_ca
[ past_ca ]
dir = .
database = ./index.txt
new_certs_dir = ./issued
serial = ./serial
default_md = sha256
policy = policy_any
unique_subject = no
copy_extensions = none
x509_extensions = leaf_ext
[ policy_any ]
commonName = supplied
organizationName = optional
EOF
export OPENSSL_CONF=$work/openssl.cnf

client_dn="/O=busbar test/CN=client"
server_dn="/O=busbar test/CN=server"

genkey() { # NAME BITS
  openssl genpkey -quiet -algorithm RSA -pkeyopt "rsa_keygen_bits:$2" -out "$1.key"
}

selfsigned() { # NAME SUBJECT EXTENSIONS
  openssl req -new -x509 -key "$1.key" -subj "$2" -days 3650 -sha256 \
    -set_serial "0x$(openssl rand -hex 8)" -extensions "$3" -out "$1.pem"
}
issue() { # NAME SUBJECT ISSUER
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -days 3650 -sha256 \
    -set_serial "0x$(openssl rand -hex 8)" -extfile openssl.cnf -extensions leaf_ext \
    -out "$1.pem" 2>/dev/null
}
p12() { # NAME [CHAIN]
  local chain=()
  [[ -n "${2:-}" ]] && chain=(-certfile "$2.pem")
  openssl pkcs12 -export -in "$1.pem" -inkey "$1.key" "${chain[@]}" -name "$1" \
    -passout "pass:$1-pass" -out "$1.p12"
}

genkey ca 2048
selfsigned ca "/O=busbar test/CN=busbar test CA" ca_ext

# keytool starts a JVM (about a second) and key generation takes a few seconds: run them
# side by side on both cores.
pids=()
if command -v keytool >/dev/null 2>&1; then
  keytool -importcert -noprompt -alias ca -file ca.pem -keystore truststore.p12 \
    -storetype PKCS12 -storepass trust-pass >/dev/null 2>&1 &
  pids+=($!)
fi
for spec in client3072:3072 server3072:3072 client:2048 server:2048 rogue:2048 \
  expired:2048 other-ca:2048 untrusted:2048; do
  genkey "${spec%%:*}" "${spec##*:}" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

selfsigned other-ca "/O=busbar test/CN=busbar other CA" ca_ext
issue client "$client_dn" ca
issue server "$server_dn" ca
issue client3072 "$client_dn" ca
issue server3072 "$server_dn" ca
issue untrusted "$client_dn" other-ca
selfsigned rogue "$client_dn" self_ext

mkdir issued
: >index.txt
openssl rand -hex 8 >serial
openssl req -new -key expired.key -subj "$client_dn" -out expired.csr
openssl ca -batch -notext -preserveDN -cert ca.pem -keyfile ca.key -in expired.csr \
  -startdate 20200101000000Z -enddate 20210101000000Z -out expired.pem 2>/dev/null

for n in client server client3072 server3072 expired; do p12 "$n" ca; done
p12 untrusted other-ca
p12 rogue

chmod 600 ./*.key
mv -f ./*.pem ./*.key ./*.p12 "$out"/
echo "$version" >"$out/.complete"
