#!/bin/sh
# Regenerates vectors.txt: known-answer signatures computed outside Go, with
# OpenSSL, over "<timestamp>.<body>" exactly as the service signs them.
# Each line: secret, timestamp, body file, signature (separated by tabs).
# Run from this folder: sh vectors.sh > vectors.txt
set -eu
vector() { # secret timestamp bodyfile
	digest=$( { printf '%s.' "$2"; cat "$3"; } | openssl dgst -sha256 -hmac "$1" -r | cut -d' ' -f1)
	printf '%s\t%s\t%s\tsha256=%s\n' "$1" "$2" "$3" "$digest"
}
vector whsec_test_secret 1763719200000 body_user_identified.json
vector whsec_test_secret 1763719200001 body_user_identified.json
vector other-secret 1763719200000 body_user_identified.json
vector whsec_test_secret 1763719200000 body_minimal.json
vector 's3cr3t with spaces & symbols!' 0 body_empty.txt
