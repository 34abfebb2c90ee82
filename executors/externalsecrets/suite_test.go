package externalsecrets_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	bao "github.com/openbao/openbao/api/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"git.ddupan.top/panxiao81/ayatori/integration"
)

// The executor's own suite runs against one set of real servers shared by
// every test of the package: kube-apiserver + etcd with ESO's CRDs, an
// OpenBao-compatible server with KV v2 at "kv", and the External Secrets
// Operator with a Ready ClusterSecretStore for it. envtest runs no
// garbage collector: only the executor (and ESO) delete anything here.

// env is the shared set of servers.
type env struct {
	cp  *integration.ControlPlane
	bao *integration.OpenBao
	eso *integration.ExternalSecrets
	kv  *bao.KVv2
}

var (
	shared     *env
	sharedErr  error
	sharedOnce sync.Once
)

func TestMain(m *testing.M) {
	// The clients log through controller-runtime; nothing to show here.
	log.SetLogger(logr.Discard())
	code := m.Run()
	if shared != nil {
		shared.close()
	}
	os.Exit(code)
}

// getEnv skips t in -short mode and starts the shared servers on first use.
func getEnv(t *testing.T) *env {
	t.Helper()
	integration.Servers(t)
	sharedOnce.Do(func() {
		start := time.Now()
		shared, sharedErr = startEnv(context.Background())
		if sharedErr == nil {
			fmt.Fprintf(os.Stderr, "externalsecrets: servers up in %s\n", time.Since(start).Round(100*time.Millisecond))
		}
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

func startEnv(ctx context.Context) (_ *env, err error) {
	e := &env{}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.cp, err = integration.NewControlPlane(integration.ControlPlaneOptions{ExternalSecretsCRDs: true}); err != nil {
		return nil, err
	}
	if e.bao, err = integration.NewOpenBao(ctx); err != nil {
		return nil, err
	}
	c, err := e.bao.Client(e.bao.RootToken)
	if err != nil {
		return nil, err
	}
	e.kv = c.KVv2(integration.KVMount)
	if e.eso, err = integration.NewExternalSecrets(ctx, e.cp, e.bao, integration.ExternalSecretsOptions{
		StoreName: integration.StoreName, Namespace: integration.ControllerNamespace}); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *env) close() {
	if e.eso != nil {
		e.eso.Close()
	}
	if e.bao != nil {
		e.bao.Close()
	}
	if e.cp != nil {
		e.cp.Close()
	}
}
