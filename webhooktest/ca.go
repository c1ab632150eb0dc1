package webhooktest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"sync"
	"time"
)

// The certificates are valid from the Unix epoch to RFC 5280's "no
// well-defined expiration date", so that a client on a fake clock (a
// testing/synctest bubble starts in 2000) trusts them as well. The keys
// never leave the process.
var (
	validFrom  = time.Unix(0, 0).UTC()
	validUntil = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// authority is the process's test CA: a self-signed ECDSA P-256
// certificate and its key, made on first use.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var testCA = sync.OnceValue(func() *authority {
	key := newKey()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{Organization: []string{"webhooktest"}, CommonName: "webhooktest CA"},
		NotBefore:             validFrom,
		NotAfter:              validUntil,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs servers' certificates only
	}
	return &authority{cert: createCertificate(tmpl, tmpl, &key.PublicKey, key), key: key}
})

// issue returns a new certificate for a Server, with a key of its own,
// valid for 127.0.0.1, ::1 and localhost and signed by the CA.
func (ca *authority) issue() tls.Certificate {
	key := newKey()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{Organization: []string{"webhooktest"}, CommonName: "webhooktest server"},
		NotBefore:   validFrom,
		NotAfter:    validUntil,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	leaf := createCertificate(tmpl, ca.cert, &key.PublicKey, ca.key)
	return tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
}

func newKey() *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic("webhooktest: generating a key: " + err.Error())
	}
	return key
}

// createCertificate signs tmpl with parent's key; a nil SerialNumber gets a
// random one.
func createCertificate(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, parentKey *ecdsa.PrivateKey) *x509.Certificate {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		panic("webhooktest: creating a certificate: " + err.Error())
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		panic("webhooktest: parsing a certificate: " + err.Error())
	}
	return cert
}

// RootCAs returns a new pool that holds the process's test CA, which signs
// the certificate of every [Server] of the process: with it as the RootCAs
// of a tls.Config, a client of your own trusts them all, as every
// [Server.Client] does. The CA (an ECDSA P-256 key, valid from 1970 on,
// with no expiry) is made on the first call or the first Server, once per
// process; its key never leaves the process. The pool is the caller's to
// change. It is safe for concurrent use.
func RootCAs() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(testCA().cert)
	return pool
}
