// Command kubectl-ayatori is a kubectl plugin (`kubectl ayatori`) that
// answers "why is this object where it is" from the live object and its
// journal: why, timeline, replay and verify for one Ayatori object. It
// takes kubectl's flags (--kubeconfig, --context, -n/--namespace, ...) for
// the cluster and the journal's read-only identity for NATS
// (--journal-server, --journal-nkey, --journal-ca; env NATS_URL,
// NATS_NKEY, NATS_CA). See docs/operations.md "kubectl ayatori".
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"git.ddupan.top/panxiao81/ayatori/internal/journalcli"
	"git.ddupan.top/panxiao81/ayatori/internal/redact"
)

func main() {
	ctrllog.SetLogger(ctrllog.Log.WithSink(ctrllog.NullLogSink{}))
	cmd := newRootCommand(os.Stdout, os.Stderr)
	if err := cmd.Execute(); err != nil {
		var quiet *exitError
		if !errors.As(err, &quiet) {
			fmt.Fprintln(os.Stderr, "kubectl ayatori:", err)
		}
		os.Exit(journalcli.ExitCode(err))
	}
}

// kind is one Ayatori kind the plugin resolves.
type kind struct {
	Kind, Condition string
	Namespaced      bool
	GVR             schema.GroupVersionResource
}

var kinds = map[string]kind{}

func init() {
	db := func(res string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "database.ayatori.ddupan.top", Version: "v1alpha1", Resource: res}
	}
	ex := func(res string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "execution.ayatori.ddupan.top", Version: "v1alpha1", Resource: res}
	}
	for _, k := range []struct {
		names []string
		k     kind
	}{
		{[]string{"postgresqltenant", "postgresqltenants", "pgtenant", "tenant", "tenants"}, kind{"PostgreSQLTenant", "Ready", true, db("postgresqltenants")}},
		{[]string{"postgresqlinstance", "postgresqlinstances", "pginstance", "instance", "instances"}, kind{"PostgreSQLInstance", "Ready", false, db("postgresqlinstances")}},
		{[]string{"job", "jobs", "ajob"}, kind{"Job", "Succeeded", true, ex("jobs")}},
		{[]string{"jobclass", "jobclasses"}, kind{"JobClass", "Ready", false, ex("jobclasses")}},
	} {
		for _, n := range k.names {
			kinds[n] = k.k
		}
	}
}

type options struct {
	kube    *genericclioptions.ConfigFlags
	journal journalcli.Source
	output  string
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	o := &options{kube: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use:   "kubectl-ayatori",
		Short: "Ask Ayatori why an object is where it is",
		Long: `kubectl ayatori explains an Ayatori object (PostgreSQLTenant, PostgreSQLInstance, Job,
JobClass) from the live object and its operation journal.

  kubectl ayatori why tenant/shop -n acme       the condition, the step, the last intent and
                                                outcome, what it waits for, what to do
  kubectl ayatori timeline job/nightly -n ci    every intent and outcome, in order
  kubectl ayatori replay tenant/shop -n acme    the derived state, compared with the live object
  kubectl ayatori verify tenant/shop -n acme    the journal's invariants for this object

Kinds: tenant (pgtenant, postgresqltenant), instance (pginstance), job (ajob), jobclass.
The journal is read with its read-only identity: --journal-server (env NATS_URL),
--journal-nkey (env NATS_NKEY), --journal-ca (env NATS_CA); --journal-trusted-keys checks
every record's proof of origin. Exit status: 0 success, 1 invariant violations (verify),
2 other errors, 3 not found.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl ayatori"},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	o.kube.AddFlags(pf)
	pf.StringVar(&o.journal.Server, "journal-server", os.Getenv("NATS_URL"), "NATS server URL of the journal (env NATS_URL)")
	// The default may come from NATS_URL: --help shows it without credentials.
	pf.Lookup("journal-server").DefValue = redact.URLList(o.journal.Server)
	pf.StringVar(&o.journal.NKey, "journal-nkey", os.Getenv("NATS_NKEY"), "NKey seed file of the journal's read-only identity (env NATS_NKEY)")
	pf.StringVar(&o.journal.Creds, "journal-creds", os.Getenv("NATS_CREDS"), "NATS credentials file (env NATS_CREDS)")
	pf.StringVar(&o.journal.TLSCA, "journal-ca", os.Getenv("NATS_CA"), "CA file of the NATS servers (env NATS_CA)")
	pf.StringVar(&o.journal.TLSCert, "journal-cert", os.Getenv("NATS_CERT"), "client certificate file for NATS (env NATS_CERT)")
	pf.StringVar(&o.journal.TLSKey, "journal-key", os.Getenv("NATS_KEY"), "client key file for NATS (env NATS_KEY)")
	pf.StringVar(&o.journal.TrustedKeys, "journal-trusted-keys", os.Getenv("AYATORI_JOURNAL_TRUSTED_KEYS"), "PEM public keys of the manager's journal signing keys: records without a valid proof are left out (env AYATORI_JOURNAL_TRUSTED_KEYS)")
	pf.StringVar(&o.journal.Stream, "journal-stream", "", "journal stream name (default AYATORI_JOURNAL)")
	pf.StringVar(&o.journal.SubjectPrefix, "journal-subject-prefix", "", "journal subject prefix (default ayatori)")
	pf.StringVar(&o.journal.FromFile, "journal-from-file", "", "read the journal from an NDJSON export instead of NATS")
	pf.StringVarP(&o.output, "output", "o", "", "output format of why: json or yaml (default: text)")
	root.AddCommand(o.whyCommand(), o.journalCommand("timeline", "Every intent and outcome of one object, in order"),
		o.journalCommand("replay", "The state derived from one object's journal, compared with the live object"),
		o.journalCommand("verify", "The journal's invariants for one object (exit status 1 on a violation)"))
	return root
}

// get reads the live object KIND/NAME (or KIND NAME).
func (o *options) get(ctx context.Context, args []string) (kind, *unstructured.Unstructured, error) {
	ref := strings.Join(args, "/")
	kn, name, ok := strings.Cut(ref, "/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return kind{}, nil, fmt.Errorf("name one object as KIND/NAME (for example tenant/shop), got %q", ref)
	}
	k, ok := kinds[strings.ToLower(kn)]
	if !ok {
		return kind{}, nil, fmt.Errorf("unknown kind %q: use tenant, instance, job or jobclass", kn)
	}
	cfg, err := o.kube.ToRESTConfig()
	if err != nil {
		return k, nil, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return k, nil, err
	}
	var ri dynamic.ResourceInterface = dc.Resource(k.GVR)
	if k.Namespaced {
		ns, _, err := o.kube.ToRawKubeConfigLoader().Namespace()
		if err != nil {
			return k, nil, err
		}
		ri = dc.Resource(k.GVR).Namespace(ns)
	}
	obj, err := ri.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return k, nil, &notFound{fmt.Sprintf("%s %q not found (it may be gone: `ayatori-journal timeline --kind %s --name %s` reads what the journal kept)", k.Kind, name, k.Kind, name)}
	}
	return k, obj, err
}

// exitError ends the command with its status and nothing more to print.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
func (e *exitError) ExitCode() int { return e.code }

type notFound struct{ msg string }

func (e *notFound) Error() string { return e.msg }
func (e *notFound) ExitCode() int { return 3 }

func (o *options) whyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "why KIND/NAME",
		Short: "Why the object is where it is, and what to do",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.output != "" && o.output != "json" && o.output != "yaml" {
				return fmt.Errorf("--output must be json or yaml, got %q", o.output)
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			k, obj, err := o.get(ctx, args)
			if err != nil {
				return err
			}
			recs, untrusted, jerr := journalcli.ReadObject(ctx, o.journal, string(obj.GetUID()))
			now := time.Now()
			e := explain(k.Kind, k.Condition, obj, recs, untrusted, now)
			if jerr != nil {
				// The live object still answers half the question (and the
				// journal being unreachable may be the incident).
				e.Journal = "unreachable: " + jerr.Error()
				e.Untrusted = 0
				defer func() {
					fmt.Fprintln(cmd.ErrOrStderr(), "kubectl ayatori: the journal could not be read; the answer above is from the live object alone (see docs/runbook.md#ayatorijournalunavailable)")
				}()
			}
			switch o.output {
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(e); err != nil || jerr == nil {
					return err
				}
				return &exitError{2}
			case "yaml":
				b, err := yaml.Marshal(e)
				if err != nil {
					return err
				}
				if _, err = cmd.OutOrStdout().Write(b); err != nil || jerr == nil {
					return err
				}
				return &exitError{2}
			}
			printExplanation(cmd.OutOrStdout(), e, now)
			if jerr != nil {
				return &exitError{2}
			}
			return nil
		},
	}
}

// journalCommand runs ayatori-journal's command name for the one object
// KIND/NAME resolves to (by its UID), with the journal flags given.
func (o *options) journalCommand(name, short string) *cobra.Command {
	return &cobra.Command{
		Use:   name + " KIND/NAME",
		Short: short,
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			_, obj, err := o.get(ctx, args)
			if err != nil {
				return err
			}
			jargs := append(o.journal.Args(), name, "--uid", string(obj.GetUID()))
			if o.output == "json" {
				jargs = append(jargs, "-o", "json")
			} else if o.output != "" {
				return fmt.Errorf("--output of %s must be json, got %q", name, o.output)
			}
			if name == "replay" {
				// Compare with the live object in the cluster the object
				// was read from: the kubeconfig as loaded (files merged,
				// --context applied), minified to one file.
				kc, cleanup, err := o.replayKubeconfig()
				if err != nil {
					return err
				}
				defer cleanup()
				jargs = append(jargs, "--kubeconfig", kc)
			}
			j := journalcli.NewRootCommand(cmd.OutOrStdout(), cmd.ErrOrStderr())
			j.SetArgs(jargs)
			return j.ExecuteContext(ctx)
		},
	}
}

// replayKubeconfig writes the kubeconfig the plugin uses (every file
// merged, --context, --cluster and --user applied) as one minified,
// flattened file readable only by this user, for replay's live comparison;
// cleanup removes it.
func (o *options) replayKubeconfig() (path string, cleanup func(), err error) {
	raw, err := o.kube.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return "", nil, err
	}
	if c := o.kube.Context; c != nil && *c != "" {
		raw.CurrentContext = *c
	}
	if ctx, ok := raw.Contexts[raw.CurrentContext]; ok {
		ctx = ctx.DeepCopy()
		if c := o.kube.ClusterName; c != nil && *c != "" {
			ctx.Cluster = *c
		}
		if u := o.kube.AuthInfoName; u != nil && *u != "" {
			ctx.AuthInfo = *u
		}
		raw.Contexts[raw.CurrentContext] = ctx
	}
	if err := clientcmdapi.MinifyConfig(&raw); err != nil {
		return "", nil, fmt.Errorf("kubeconfig: %w", err)
	}
	if err := clientcmdapi.FlattenConfig(&raw); err != nil {
		return "", nil, fmt.Errorf("kubeconfig: %w", err)
	}
	f, err := os.CreateTemp("", "kubectl-ayatori-*.kubeconfig")
	if err != nil {
		return "", nil, err
	}
	f.Close()
	cleanup = func() { _ = os.Remove(f.Name()) }
	if err := clientcmd.WriteToFile(raw, f.Name()); err != nil {
		cleanup()
		return "", nil, err
	}
	return f.Name(), cleanup, nil
}
