// Command ayatori-bootstrap makes the trust material of one Ayatori
// installation, once, and writes it as Kubernetes objects for
// `kubectl apply` (docs/journal.md "Trust model", docs/database/deployment.md
// "Bootstrap"):
//
//	ayatori-bootstrap --out ./ayatori-secrets
//	kubectl apply -f ./ayatori-secrets/secrets.yaml
//	kubectl apply -k deploy/overlays/prod
//
// It writes the NATS servers' CA and certificate, the NKeys of the journal's
// two NATS identities, and the manager's journal signing key with the
// trusted public keys. --rotate-journal-key writes only a new signing key
// and a trusted-keys ConfigMap that also lists the keys of --trusted-keys
// (the ones in use), so records signed before stay verifiable.
//
// The output holds secrets: it is written with mode 0600 and never printed.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"git.ddupan.top/panxiao81/ayatori/internal/bootstrap"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ayatori-bootstrap:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("ayatori-bootstrap", flag.ContinueOnError)
	namespace := fs.String("namespace", "ayatori-system", "the controller namespace")
	out := fs.String("out", "", "directory to write secrets.yaml into (created; must not hold one)")
	dns := fs.String("nats-dns-names", "", "comma-separated extra DNS names of the NATS servers (besides the Services of deploy/)")
	rotate := fs.Bool("rotate-journal-key", false, "write only a new journal signing key and the trusted keys (with --trusted-keys)")
	trustedPath := fs.String("trusted-keys", "", "PEM public keys (a file or a directory) to keep trusting, e.g. the ConfigMap ayatori-journal-trusted-keys extracted")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("--out is required")
	}
	if *rotate && *trustedPath == "" {
		return errors.New("--rotate-journal-key needs --trusted-keys (the keys in use), or records signed before would no longer verify")
	}
	var trusted *journal.TrustedKeys
	if *trustedPath != "" {
		t, err := journal.LoadTrustedKeys(*trustedPath)
		if err != nil {
			return err
		}
		trusted = t
	}
	signer, err := journal.NewSigningKey()
	if err != nil {
		return err
	}
	var nats *bootstrap.NATS
	if !*rotate {
		names := bootstrap.ClusterNames(*namespace)
		for _, n := range strings.Split(*dns, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		if nats, err = bootstrap.NewNATS(names, nil, bootstrap.ServerValidity); err != nil {
			return err
		}
	}
	data, err := bootstrap.Manifests(*namespace, nats, signer, trusted)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o700); err != nil {
		return err
	}
	path := filepath.Join(*out, "secrets.yaml")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("%w (remove it first: its keys are in use if it was applied)", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("wrote %s (journal signing key %s); apply it with kubectl apply -f %s, then keep it offline or delete it\n", path, signer.ID(), path)
	return nil
}
