package bootstrap

import (
	"bytes"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Names of the objects Manifests writes, as deploy/ mounts them.
const (
	// SecretNATSTLS holds tls.crt, tls.key and ca.crt for the NATS pods.
	SecretNATSTLS = "ayatori-nats-tls"
	// ConfigMapNATSCA holds ca.crt for the clients (manager, forensics).
	ConfigMapNATSCA = "ayatori-nats-ca"
	// ConfigMapNATSIdentities holds the identities' public NKeys as the
	// environment of the NATS pods (deploy/nats auth.conf).
	ConfigMapNATSIdentities = "ayatori-nats-identities"
	// SecretNATSManager and SecretNATSReader hold the identities' NKey
	// seeds (key "nkey").
	SecretNATSManager = "ayatori-nats-manager"
	SecretNATSReader  = "ayatori-nats-reader"
	// SecretJournalSigningKey holds the manager's journal signing key
	// (key "signing.pem").
	SecretJournalSigningKey = "ayatori-journal-signing-key"
	// ConfigMapJournalTrustedKeys holds the trusted public keys, one
	// "<key ID>.pem" entry each.
	ConfigMapJournalTrustedKeys = "ayatori-journal-trusted-keys"
)

// Manifests renders the installation's trust material as Kubernetes
// objects in namespace (a YAML stream): n may be nil (only the journal
// key, for a rotation); trusted are the public keys to keep trusting
// besides the signer's (the previous keys during a rotation).
func Manifests(namespace string, n *NATS, signer *journal.SigningKey, trusted *journal.TrustedKeys) ([]byte, error) {
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "ayatori"}}
	}
	var objs []any
	if n != nil {
		objs = append(objs,
			&corev1.Secret{TypeMeta: typeMeta("Secret"), ObjectMeta: meta(SecretNATSTLS), Type: corev1.SecretTypeTLS,
				Data: map[string][]byte{"tls.crt": n.ServerCert, "tls.key": n.ServerKey, "ca.crt": n.CACert}},
			&corev1.ConfigMap{TypeMeta: typeMeta("ConfigMap"), ObjectMeta: meta(ConfigMapNATSCA), Data: map[string]string{"ca.crt": string(n.CACert)}},
			&corev1.ConfigMap{TypeMeta: typeMeta("ConfigMap"), ObjectMeta: meta(ConfigMapNATSIdentities),
				Data: map[string]string{"AYATORI_NATS_MANAGER_NKEY": n.ManagerPublic, "AYATORI_NATS_READER_NKEY": n.ReaderPublic}},
			&corev1.Secret{TypeMeta: typeMeta("Secret"), ObjectMeta: meta(SecretNATSManager), Data: map[string][]byte{"nkey": n.ManagerSeed}},
			&corev1.Secret{TypeMeta: typeMeta("Secret"), ObjectMeta: meta(SecretNATSReader), Data: map[string][]byte{"nkey": n.ReaderSeed}},
		)
	}
	keys := map[string]string{KeyFile(signer.ID()): string(signer.MarshalPublicPEM())}
	if trusted != nil {
		for id, pemText := range trusted.PEMs() {
			keys[KeyFile(id)] = pemText
		}
	}
	objs = append(objs,
		&corev1.Secret{TypeMeta: typeMeta("Secret"), ObjectMeta: meta(SecretJournalSigningKey), Data: map[string][]byte{"signing.pem": signer.MarshalPrivatePEM()}},
		&corev1.ConfigMap{TypeMeta: typeMeta("ConfigMap"), ObjectMeta: meta(ConfigMapJournalTrustedKeys), Data: keys},
	)
	var out bytes.Buffer
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	return out.Bytes(), nil
}

// KeyFile is the ConfigMap key of a trusted public key ("ed25519-<hex>.pem").
func KeyFile(keyID string) string { return strings.ReplaceAll(keyID, ":", "-") + ".pem" }

func typeMeta(kind string) metav1.TypeMeta { return metav1.TypeMeta{APIVersion: "v1", Kind: kind} }
