package openbao_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"git.ddupan.top/panxiao81/ayatori/executors/openbao"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

func TestCredentialStore(t *testing.T) {
	ob := integration.StartOpenBao(t)
	ctx := context.Background()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(ob.RootToken), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := openbao.NewClient(ob.Address, openbao.TokenFileAuth{Path: tokenFile}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := &openbao.Store{Client: c}
	in := openbao.CredentialIntent{Mount: "kv", Path: "postgresql-tenants/ns/app", InstanceUID: "inst-1", Username: "app", Database: "app",
		Host: "db.home.arpa", HostAddr: "192.0.2.10", Port: 5432, SSLMode: "verify-full"}
	owner := openbao.Owner{InstanceUID: "inst-1", TenantUID: "tenant-1", Namespace: "ns", Name: "app"}

	first, err := s.Write(ctx, in, owner)
	if err != nil || !first.Created || first.Version != 1 {
		t.Fatalf("first write %+v %v", first, err)
	}
	pw1, v1, err := s.Read(ctx, "kv", in.Path, owner)
	if err != nil || len(pw1) != 32 || v1 != 1 {
		t.Fatalf("read: len %d v%d %v", len(pw1), v1, err)
	}
	again, err := s.Write(ctx, in, owner)
	if err != nil || again.Created || again.Version != 1 {
		t.Fatalf("second write must reuse: %+v %v", again, err)
	}
	if pw2, _, _ := s.Read(ctx, "kv", in.Path, owner); pw2 != pw1 {
		t.Fatal("the password changed")
	}
	// Another Tenant (new UID, same path) gets Conflict and changes nothing.
	intruder := owner
	intruder.TenantUID = "tenant-2"
	_, err = s.Write(ctx, in, intruder)
	var f *openbao.Failure
	if !errors.As(err, &f) || f.Reason != "Conflict" {
		t.Fatalf("foreign write: want Conflict, got %v", err)
	}
	if err := s.Destroy(ctx, "kv", in.Path, intruder); !errors.As(err, &f) || f.Reason != "Conflict" {
		t.Fatalf("foreign destroy: want Conflict, got %v", err)
	}
	// A record written by someone else without our metadata is foreign.
	root, _ := ob.Client(ob.RootToken)
	if _, err := root.KVv2("kv").Put(ctx, "postgresql-tenants/ns/foreign", map[string]any{"password": "x"}); err != nil {
		t.Fatal(err)
	}
	foreign := in
	foreign.Path = "postgresql-tenants/ns/foreign"
	if _, err := s.Write(ctx, foreign, owner); !errors.As(err, &f) || f.Reason != "Conflict" {
		t.Fatalf("pre-existing foreign record: want Conflict, got %v", err)
	}
	// Destroy removes every version and the metadata.
	if err := s.Destroy(ctx, "kv", in.Path, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := root.KVv2("kv").GetMetadata(ctx, in.Path); err == nil {
		t.Fatal("metadata still exists after destroy")
	}
	if err := s.Destroy(ctx, "kv", in.Path, owner); err != nil {
		t.Fatalf("destroy is idempotent: %v", err)
	}
}
