package bootstrap

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CA is a certificate authority made on this machine (ECDSA P-256): the
// NATS servers' CA of an installation, and the test harness's per-run CAs.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     *ecdsa.PrivateKey
}

// Certificate is a PEM certificate and its PEM key (PKCS #8), issued by a CA.
type Certificate struct {
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA creates a self-signed CA valid for validity (from an hour ago).
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: commonName, Organization: []string{"ayatori"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Issue issues a certificate with the given DNS and IP SANs and extended
// key usages, valid for validity. A certificate with the wrong SANs (for
// example DNS "wrong.example") is how the negative host-name tests are
// built.
func (ca *CA) Issue(dnsNames, ips []string, validity time.Duration, usages ...x509.ExtKeyUsage) (*Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: first(dnsNames, "server")},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity), DNSNames: dnsNames,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: usages}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("bootstrap: %q is not an IP address", s)
		}
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	return ca.sign(tmpl, key)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func first(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}

// IssueClient issues a client-authentication certificate for the subject
// commonName (a Kubernetes user name) in the groups orgs (its Organization,
// the groups a kube-apiserver takes from an X.509 client certificate),
// valid for validity.
func (ca *CA) IssueClient(commonName string, orgs []string, validity time.Duration) (*Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: commonName, Organization: orgs},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	return ca.sign(tmpl, key)
}

// sign issues tmpl for key with the CA's key and returns both in PEM.
func (ca *CA) sign(tmpl *x509.Certificate, key *ecdsa.PrivateKey) (*Certificate, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Certificate{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}, nil
}
