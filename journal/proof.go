package journal

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Proof is a record's proof of origin: an Ed25519 signature, by one of the
// manager's journal signing keys, over the record's canonical encoding
// (docs/journal.md "Proof of origin"). Only the manager holds a signing
// key; executors and projectors act only on records whose proof verifies
// against the trusted public keys, so a client that can publish on the
// journal's subjects (a leaked NATS credential, a compromised reader) can
// not make the manager act.
type Proof struct {
	// KeyID names the signing key: KeyID of its public key.
	KeyID string `json:"keyId"`
	// Signature is the Ed25519 signature (64 bytes; base64 in JSON).
	Signature []byte `json:"sig"`
}

// signedContext separates journal signatures from any other use of the
// same key; it is signed before the canonical encoding.
const (
	recordContext     = "ayatori-journal-record-v1\n"
	checkpointContext = "ayatori-journal-checkpoint-v1\n"
)

// ErrUntrusted is wrapped by every verification failure: the record has no
// proof, names a key that is not trusted, or its signature does not match
// its content (it was written by someone else, or changed since).
var ErrUntrusted = errors.New("journal: no valid proof of origin")

// KeyID returns the ID of an Ed25519 public key: "ed25519:" and the first
// 8 bytes of its SHA-256, hex (stable, public, short enough for a record).
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(sum[:8])
}

// SigningKey signs the records and checkpoints a Store writes. It is the
// manager's secret: it lives in the Secret ayatori-journal-signing-key
// and nowhere else (docs/journal.md "Keys and rotation").
type SigningKey struct {
	id   string
	priv ed25519.PrivateKey
}

// NewSigningKey generates a new random signing key.
func NewSigningKey() (*SigningKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return &SigningKey{id: KeyID(priv.Public().(ed25519.PublicKey)), priv: priv}, nil
}

// ParseSigningKey reads a PEM "PRIVATE KEY" block (PKCS #8, Ed25519), as
// `openssl genpkey -algorithm ed25519` writes it. Errors never quote the
// key material.
func ParseSigningKey(data []byte) (*SigningKey, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, errors.New("journal: signing key: not a PEM PRIVATE KEY block (PKCS #8 Ed25519, `openssl genpkey -algorithm ed25519`)")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, errors.New("journal: signing key: not a PKCS #8 private key")
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("journal: signing key: a %T, not an Ed25519 key", k)
	}
	return &SigningKey{id: KeyID(priv.Public().(ed25519.PublicKey)), priv: priv}, nil
}

// LoadSigningKey reads a signing key file (ParseSigningKey).
func LoadSigningKey(path string) (*SigningKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("journal: signing key: %w", err)
	}
	return ParseSigningKey(data)
}

// ID returns the key's ID (KeyID of its public key).
func (k *SigningKey) ID() string { return k.id }

// Public returns the public key.
func (k *SigningKey) Public() ed25519.PublicKey { return k.priv.Public().(ed25519.PublicKey) }

// MarshalPrivatePEM returns the key as a PEM PKCS #8 block (for the
// bootstrap and the test harness, which write it to a file).
func (k *SigningKey) MarshalPrivatePEM() []byte {
	der, _ := x509.MarshalPKCS8PrivateKey(k.priv)
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// MarshalPublicPEM returns the public key as a PEM "PUBLIC KEY" block, the
// form TrustedKeys reads.
func (k *SigningKey) MarshalPublicPEM() []byte {
	der, _ := x509.MarshalPKIXPublicKey(k.Public())
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func (k *SigningKey) sign(context string, canonical []byte) *Proof {
	return &Proof{KeyID: k.id, Signature: ed25519.Sign(k.priv, append([]byte(context), canonical...))}
}

// TrustedKeys are the public keys whose signatures the manager accepts:
// the current signing key and, during a rotation, the previous ones
// (records they signed stay verifiable for as long as they are listed).
type TrustedKeys struct {
	keys map[string]ed25519.PublicKey
}

// NewTrustedKeys trusts the given public keys.
func NewTrustedKeys(pubs ...ed25519.PublicKey) *TrustedKeys {
	t := &TrustedKeys{keys: map[string]ed25519.PublicKey{}}
	for _, p := range pubs {
		t.keys[KeyID(p)] = p
	}
	return t
}

// ParseTrustedKeys reads one or more PEM "PUBLIC KEY" blocks (PKIX,
// Ed25519); anything else in the data is an error.
func ParseTrustedKeys(data []byte) (*TrustedKeys, error) {
	t := NewTrustedKeys()
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("journal: trusted keys: a PEM %q block, want PUBLIC KEY", b.Type)
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("journal: trusted keys: %v", err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("journal: trusted keys: a %T, not an Ed25519 key", k)
		}
		t.keys[KeyID(pub)] = pub
	}
	if strings.TrimSpace(string(rest)) != "" {
		return nil, errors.New("journal: trusted keys: data outside PEM blocks")
	}
	if len(t.keys) == 0 {
		return nil, errors.New("journal: trusted keys: no PUBLIC KEY block")
	}
	return t, nil
}

// LoadTrustedKeys reads trusted public keys from a file, or from every
// regular file of a directory (a mounted ConfigMap: one key per entry),
// skipping dot files.
func LoadTrustedKeys(path string) (*TrustedKeys, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("journal: trusted keys: %w", err)
	}
	if !fi.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("journal: trusted keys: %w", err)
		}
		return ParseTrustedKeys(data)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("journal: trusted keys: %w", err)
	}
	var all []byte
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(path, e.Name())
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("journal: trusted keys: %w", err)
		}
		all = append(append(all, data...), '\n')
	}
	return ParseTrustedKeys(all)
}

// IDs returns the trusted key IDs, sorted.
func (t *TrustedKeys) IDs() []string {
	out := make([]string, 0, len(t.keys))
	for id := range t.keys {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// PEMs returns every trusted key as a PEM "PUBLIC KEY" block, by key ID.
func (t *TrustedKeys) PEMs() map[string]string {
	out := make(map[string]string, len(t.keys))
	for id, pub := range t.keys {
		der, _ := x509.MarshalPKIXPublicKey(pub)
		out[id] = string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	}
	return out
}

func (t *TrustedKeys) verify(context string, p *Proof, canonical []byte) error {
	if p == nil {
		return fmt.Errorf("%w: the record has no proof", ErrUntrusted)
	}
	pub, ok := t.keys[p.KeyID]
	if !ok {
		return fmt.Errorf("%w: signed by key %q, which is not trusted", ErrUntrusted, shorten(p.KeyID))
	}
	if !ed25519.Verify(pub, append([]byte(context), canonical...), p.Signature) {
		return fmt.Errorf("%w: the signature by %s does not match the record", ErrUntrusted, p.KeyID)
	}
	return nil
}

// shorten bounds a string taken from an untrusted record before it reaches
// an error message.
func shorten(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// canonical is the record's signed encoding: its JSON without the proof
// and the read-time sequence. Encoding a decoded record gives the same
// bytes (the envelope is a fixed struct; the payload is kept as stored,
// compacted).
func (r *Record) canonical() ([]byte, error) {
	c := *r
	c.Proof = nil
	c.Sequence = 0
	return json.Marshal(&c)
}

// Sign sets the record's proof with k (the record must be complete: Append
// signs after filling in its defaults).
func (r *Record) Sign(k *SigningKey) error {
	b, err := r.canonical()
	if err != nil {
		return fmt.Errorf("journal: encode record: %w", err)
	}
	r.Proof = k.sign(recordContext, b)
	return nil
}

// Verify checks the record's proof against t; the error wraps ErrUntrusted.
func (t *TrustedKeys) Verify(r *Record) error {
	b, err := r.canonical()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUntrusted, err)
	}
	return t.verify(recordContext, r.Proof, b)
}

// ObjectProof proves that the manager made an object outside the journal,
// for example a backend object an executor created (an annotation of it):
// an Ed25519 signature by the journal signing key over purpose and the
// object's identity. Whoever can read the object can copy the proof, so it
// binds the identity of what it was made for (a name and the UID it was
// made for); it does not replace recording what was made.
type ObjectProof struct {
	Signer *SigningKey
	Trust  *TrustedKeys
}

// objectContext separates object proofs from record signatures.
const objectContext = "ayatori-object-proof-v1\n"

// Sign returns the proof for msg: "<key ID>:<base64url signature>".
func (p ObjectProof) Sign(purpose, msg string) string {
	sig := ed25519.Sign(p.Signer.priv, []byte(objectContext+purpose+"\n"+msg))
	return p.Signer.id + ":" + base64.RawURLEncoding.EncodeToString(sig)
}

// Verify reports whether proof is a valid proof for msg by a trusted key.
func (p ObjectProof) Verify(purpose, msg, proof string) bool {
	if p.Trust == nil {
		return false
	}
	i := strings.LastIndexByte(proof, ':')
	if i < 0 {
		return false
	}
	pub, ok := p.Trust.keys[proof[:i]]
	if !ok {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(proof[i+1:])
	return err == nil && ed25519.Verify(pub, []byte(objectContext+purpose+"\n"+msg), sig)
}

// MessageProofHeader is the NATS header of every message the manager
// publishes on the journal and checkpoint streams: "<key ID>:<base64url
// Ed25519 signature>" over messageContext, the subject, a newline and the
// message's bytes as stored. Unlike a record's proof it is checked without
// decoding the record, so a reader can attribute a record of a schema
// version newer than it reads (whose fields it does not know, so whose
// record proof it can not check): with a valid message proof it is a
// newer manager's and the reader stops at it; without one it is skipped
// as untrusted (docs/journal.md "Proof of origin"). Every schema version
// keeps this header.
const MessageProofHeader = "Ayatori-Message-Proof"

const messageContext = "ayatori-journal-message-v1\n"

// signedMessage is what a message proof signs: messageContext, the
// subject, a newline and data.
func signedMessage(subject string, data []byte) []byte {
	return append([]byte(messageContext+subject+"\n"), data...)
}

// messageProof is the MessageProofHeader value for data on subject.
func (k *SigningKey) messageProof(subject string, data []byte) string {
	return k.id + ":" + base64.RawURLEncoding.EncodeToString(ed25519.Sign(k.priv, signedMessage(subject, data)))
}

// verifyMessage checks a MessageProofHeader value for data on subject;
// the error wraps ErrUntrusted.
func (t *TrustedKeys) verifyMessage(subject string, data []byte, proof string) error {
	if proof == "" {
		return fmt.Errorf("%w: the message has no message proof", ErrUntrusted)
	}
	i := strings.LastIndexByte(proof, ':')
	if i < 0 {
		return fmt.Errorf("%w: the message proof is malformed", ErrUntrusted)
	}
	pub, ok := t.keys[proof[:i]]
	if !ok {
		return fmt.Errorf("%w: the message is signed by key %q, which is not trusted", ErrUntrusted, shorten(proof[:i]))
	}
	sig, err := base64.RawURLEncoding.DecodeString(proof[i+1:])
	if err != nil || !ed25519.Verify(pub, signedMessage(subject, data), sig) {
		return fmt.Errorf("%w: the message proof does not match the message", ErrUntrusted)
	}
	return nil
}
