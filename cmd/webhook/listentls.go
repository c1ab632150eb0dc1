package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/signedhook/webhook/internal/redact"
)

// throwawayCA is listen -tls's certificate authority: made at start,
// its key never written and gone at exit, so it can sign nothing else.
type throwawayCA struct {
	cert  []byte          // the CA certificate, DER
	leaf  tls.Certificate // the server's certificate, signed by the CA
	names []string        // what the server's certificate is for
}

// newThrowawayCA makes a CA and a server certificate for 127.0.0.1, ::1,
// localhost and host (the listen address's host, when it names one). The
// CA is constrained to those names, valid for a week from an hour ago.
func newThrowawayCA(host string) (*throwawayCA, error) {
	dnsNames := []string{"localhost"}
	ips := []net.IP{net.IPv4(127, 0, 0, 1).To4(), net.IPv6loopback}
	if ip := net.ParseIP(host); ip != nil {
		if ip4 := ip.To4(); ip4 != nil {
			// Four bytes, as the leaf's IP address is written: a name
			// constraint of sixteen bytes permits no IPv4 address, and a
			// leaf with one address not permitted verifies for none.
			ip = ip4
		}
		// Any loopback address but the two already there: all of
		// 127.0.0.0/8 is this machine's.
		if !ip.IsUnspecified() && !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	} else if host != "" && host != "localhost" {
		dnsNames = append(dnsNames, host)
	}
	var ranges []*net.IPNet
	for _, ip := range ips {
		bits := 8 * len(ip)
		ranges = append(ranges, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{
		SerialNumber:                serial(),
		Subject:                     pkix.Name{CommonName: caNamePrefix + now.UTC().Format(time.RFC3339)},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.Add(7 * 24 * time.Hour),
		IsCA:                        true,
		BasicConstraintsValid:       true,
		MaxPathLenZero:              true,
		KeyUsage:                    x509.KeyUsageCertSign,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         dnsNames,
		PermittedIPRanges:           ranges,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    ca.NotBefore,
		NotAfter:     ca.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ips)+len(dnsNames))
	for _, ip := range ips {
		names = append(names, ip.String())
	}
	return &throwawayCA{
		cert:  caDER,
		leaf:  tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: leafKey},
		names: append(names, dnsNames...),
	}, nil
}

// serial returns a random 128-bit serial number.
func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	return n
}

// PEM returns the CA certificate in PEM, for the sender to trust.
func (c *throwawayCA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert})
}

// Fingerprint returns the CA certificate's SHA-256 fingerprint, as
// "openssl x509 -fingerprint -sha256" writes it.
func (c *throwawayCA) Fingerprint() string {
	sum := sha256.Sum256(c.cert)
	hex := make([]string, len(sum))
	for i, b := range sum {
		hex[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(hex, ":")
}

// write writes the CA certificate to path, or to a new file in the
// temporary directory when path is "". It returns the file's path and
// a function that removes the file it made (and nothing for path).
func (c *throwawayCA) write(path string) (string, func(), error) {
	if path != "" {
		if err := c.writeOut(path); err != nil {
			return "", nil, err
		}
		return path, func() {}, nil
	}
	f, err := os.CreateTemp("", "webhook-listen-ca-*.pem")
	if err != nil {
		return "", nil, err
	}
	_, err = f.Write(c.PEM())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", nil, err
	}
	return f.Name(), func() { os.Remove(f.Name()) }, nil
}

// writeOut writes the CA certificate to path, -ca-out, which is new, made
// without following a link, or the CA certificate of an earlier listen
// -tls (a run before this one, the README's command again): that is
// replaced whole, by a rename, so a sender reading it never sees a part,
// and keeps its mode. Any other file, link or directory is left alone
// and refused: -ca-out ~/.ssh/id_ed25519 or a mistyped key.pem is no
// file to lose.
func (c *throwawayCA) writeOut(path string) error {
	shown := redact.Printable(path)
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// O_EXCL: a file made since Lstat is not overwritten either.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return usagef("-ca-out %s: %v", shown, withoutPath(err))
		}
		_, err = f.Write(c.PEM())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
			return usagef("-ca-out %s: writing the CA certificate: %v", shown, withoutPath(err))
		}
		return nil
	case err != nil:
		return usagef("-ca-out %s: %v", shown, withoutPath(err))
	case !fi.Mode().IsRegular() || !isThrowawayCAFile(path):
		return usagef("-ca-out %s exists and is not the CA certificate of an earlier webhook listen -tls; "+
			"not overwritten: remove it or give another file", shown)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return usagef("-ca-out %s: %v", shown, withoutPath(err))
	}
	_, err = f.Write(c.PEM())
	if err == nil {
		err = f.Chmod(fi.Mode().Perm())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return usagef("-ca-out %s: replacing the earlier CA certificate: %v", shown, withoutPath(err))
	}
	return nil
}

// caNamePrefix starts the common name of every CA listen -tls makes.
const caNamePrefix = "webhook listen -tls throwaway CA "

// isThrowawayCAFile reports whether the file at path holds one PEM
// certificate and nothing else, that of a CA listen -tls made.
func isThrowawayCAFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 64<<10)) // one is under 1 KiB
	if err != nil {
		return false
	}
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	return err == nil && cert.IsCA && strings.HasPrefix(cert.Subject.CommonName, caNamePrefix)
}

// withoutPath returns the cause of a *fs.PathError, whose text repeats
// the path the error names already.
func withoutPath(err error) error {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
