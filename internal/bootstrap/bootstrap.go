// Package bootstrap makes the trust material of one Ayatori installation,
// once, before `kubectl apply -k deploy/overlays/...`: the NATS servers' CA
// and certificate (client TLS and mutual TLS on routes), the NKeys of the
// journal's two NATS identities (manager, read-only forensics reader), and
// the manager's journal signing key (docs/journal.md "Trust model"). The
// test harness makes its servers' material with the same code.
//
// Nothing here is ever logged: the caller writes Manifests to a file that
// only an administrator reads, and applies it.
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

	"github.com/nats-io/nkeys"
)

// Validity of the CA and the server certificate made by NewNATS.
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	ServerValidity = 2 * 365 * 24 * time.Hour
)

// NATS is the trust material of the journal's NATS servers and clients.
type NATS struct {
	// CACert is the PEM CA certificate that issued ServerCert (clients and
	// peers verify with it); the CA's key is discarded once it signed.
	CACert []byte
	// ServerCert and ServerKey are the PEM certificate and key every NATS
	// server presents to clients and, as a client certificate, to its
	// route peers (server and client auth).
	ServerCert, ServerKey []byte
	// ManagerSeed and ReaderSeed are the identities' NKey seeds (secret);
	// ManagerPublic and ReaderPublic their public keys (the servers').
	ManagerSeed, ReaderSeed     []byte
	ManagerPublic, ReaderPublic string
}

// NewNATS makes a CA, a server certificate for dnsNames and ips, and the
// two identities.
func NewNATS(dnsNames []string, ips []string, validity time.Duration) (*NATS, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "Ayatori NATS CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(max(validity, CAValidity)),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: first(dnsNames, "ayatori-nats")},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity), DNSNames: dnsNames,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("bootstrap: %q is not an IP address", s)
		}
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	n := &NATS{CACert: pemBlock("CERTIFICATE", caDER), ServerCert: pemBlock("CERTIFICATE", der), ServerKey: pemBlock("PRIVATE KEY", keyDER)}
	if n.ManagerSeed, n.ManagerPublic, err = newUser(); err != nil {
		return nil, err
	}
	if n.ReaderSeed, n.ReaderPublic, err = newUser(); err != nil {
		return nil, err
	}
	return n, nil
}

// ClusterNames are the DNS names the NATS servers of deploy/ answer to in
// namespace: the client Service and every pod of the headless Service (the
// routes' and the clients' server lists).
func ClusterNames(namespace string) []string {
	var out []string
	for _, suffix := range []string{"", "." + namespace, "." + namespace + ".svc", "." + namespace + ".svc.cluster.local"} {
		out = append(out, "ayatori-nats"+suffix, "*.ayatori-nats-headless"+suffix)
	}
	return out
}

func newUser() (seed []byte, public string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", err
	}
	if seed, err = kp.Seed(); err != nil {
		return nil, "", err
	}
	public, err = kp.PublicKey()
	return seed, public, err
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
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
