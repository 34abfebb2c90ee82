package openbao_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bao "github.com/openbao/openbao/api/v2"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
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
	c, err := openbao.NewClient(ob.Address, openbao.TokenFileAuth{Path: tokenFile}, 10*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	s := &openbao.Store{Client: c}
	in := dbcontract.CredentialIntent{Mount: "kv", Path: "postgresql-tenants/ns/app", InstanceUID: "inst-1", Username: "app", Database: "app",
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
	var f *dbcontract.Failure
	if !errors.As(err, &f) || f.Reason != "Conflict" {
		t.Fatalf("foreign write: want Conflict, got %v", err)
	}
	// Destroying someone else's record is skipped and reported, never a
	// failure that would keep a finalizer.
	if skipped, err := s.Destroy(ctx, "kv", in.Path, intruder); err != nil || !strings.Contains(skipped, "left in place") || !strings.Contains(skipped, "tenant-1") {
		t.Fatalf("foreign destroy: want skipped, got %q %v", skipped, err)
	}
	if pw2, v2, err := s.Read(ctx, "kv", in.Path, owner); err != nil || pw2 != pw1 || v2 != 1 {
		t.Fatalf("a skipped destroy changed the record: v%d %v", v2, err)
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
	if skipped, err := s.Destroy(ctx, "kv", in.Path, owner); err != nil || skipped != "" {
		t.Fatal(skipped, err)
	}
	if _, err := root.KVv2("kv").GetMetadata(ctx, in.Path); err == nil {
		t.Fatal("metadata still exists after destroy")
	}
	if skipped, err := s.Destroy(ctx, "kv", in.Path, owner); err != nil || skipped != "" {
		t.Fatalf("destroy is idempotent: %q %v", skipped, err)
	}
}

func newStore(t *testing.T) (*openbao.Store, *integration.OpenBao) {
	t.Helper()
	ob := integration.StartOpenBao(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(ob.RootToken), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := openbao.NewClient(ob.Address, openbao.TokenFileAuth{Path: tokenFile}, 10*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	return &openbao.Store{Client: c}, ob
}

// TestCredentialNeverSecondPassword (issue 10 §3): once the Tenant's
// password was issued, a record deleted out of band (metadata and all
// versions, or only the data) is a Conflict that names the path and what to
// do; nothing is written, so no second password can reach the application.
func TestCredentialNeverSecondPassword(t *testing.T) {
	s, ob := newStore(t)
	ctx := context.Background()
	root, _ := ob.Client(ob.RootToken)
	in := dbcontract.CredentialIntent{Mount: "kv", Path: "postgresql-tenants/ns/lost", InstanceUID: "inst-1", Username: "lost", Database: "lost",
		Host: "db.home.arpa", HostAddr: "192.0.2.10", Port: 5432, SSLMode: "verify-full"}
	owner := openbao.Owner{InstanceUID: "inst-1", TenantUID: "tenant-1", Namespace: "ns", Name: "lost"}
	if out, err := s.Write(ctx, in, owner); err != nil || !out.Created {
		t.Fatalf("first write %+v %v", out, err)
	}
	if err := root.KVv2("kv").DeleteMetadata(ctx, in.Path); err != nil {
		t.Fatal(err)
	}
	again := in
	again.AlreadyIssued = true
	_, err := s.Write(ctx, again, owner)
	var f *dbcontract.Failure
	if !errors.As(err, &f) || f.Reason != "Conflict" || !strings.Contains(f.Message, "kv/"+in.Path) || !strings.Contains(f.Message, "never generates a second password") {
		t.Fatalf("absent record after issue: want Conflict naming the path, got %v", err)
	}
	if _, err := root.KVv2("kv").GetMetadata(ctx, in.Path); err == nil {
		t.Fatal("something was written for an absent record whose password was already issued")
	}
	// Metadata without a version (a crash between the two writes, or a
	// record emptied by hand) is the same case.
	if err := root.KVv2("kv").PutMetadata(ctx, in.Path, bao.KVMetadataPutInput{CustomMetadata: map[string]any{
		openbao.MetaInstanceUID: "inst-1", openbao.MetaTenantUID: "tenant-1", openbao.MetaTenant: "ns/lost"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, again, owner); !errors.As(err, &f) || f.Reason != "Conflict" {
		t.Fatalf("metadata-only record after issue: want Conflict, got %v", err)
	}
	if md, err := root.KVv2("kv").GetMetadata(ctx, in.Path); err != nil || md.CurrentVersion != 0 {
		t.Fatalf("a version was written: %+v %v", md, err)
	}
	// Without a prior issue (a fresh Tenant) the same state is completed.
	if out, err := s.Write(ctx, in, owner); err != nil || !out.Created {
		t.Fatalf("fresh write %+v %v", out, err)
	}
}

// TestCredentialDeletedVersion (issue 10 §3): a soft-deleted current
// version is reported with the path and "undelete", a destroyed one with
// "destroyed"; Write and Read write nothing; after an undelete the same
// password is reused.
func TestCredentialDeletedVersion(t *testing.T) {
	s, ob := newStore(t)
	ctx := context.Background()
	root, _ := ob.Client(ob.RootToken)
	in := dbcontract.CredentialIntent{Mount: "kv", Path: "postgresql-tenants/ns/soft", InstanceUID: "inst-1", Username: "soft", Database: "soft",
		Host: "db.home.arpa", HostAddr: "192.0.2.10", Port: 5432, SSLMode: "verify-full"}
	owner := openbao.Owner{InstanceUID: "inst-1", TenantUID: "tenant-1", Namespace: "ns", Name: "soft"}
	if _, err := s.Write(ctx, in, owner); err != nil {
		t.Fatal(err)
	}
	pw1, _, err := s.Read(ctx, "kv", in.Path, owner)
	if err != nil {
		t.Fatal(err)
	}
	if err := root.KVv2("kv").Delete(ctx, in.Path); err != nil {
		t.Fatal(err)
	}
	var f *dbcontract.Failure
	for _, issued := range []bool{false, true} {
		w := in
		w.AlreadyIssued = issued
		_, err := s.Write(ctx, w, owner)
		if !errors.As(err, &f) || f.Reason != "Conflict" || !strings.Contains(f.Message, "kv/"+in.Path) || !strings.Contains(f.Message, "undelete") {
			t.Fatalf("write on a deleted version (issued=%v): want Conflict with the path and undelete, got %v", issued, err)
		}
	}
	if _, _, err := s.Read(ctx, "kv", in.Path, owner); !errors.As(err, &f) || !strings.Contains(f.Message, "undelete") {
		t.Fatalf("read on a deleted version: %v", err)
	}
	if md, _ := root.KVv2("kv").GetMetadata(ctx, in.Path); md.CurrentVersion != 1 {
		t.Fatalf("a second version was written: %d", md.CurrentVersion)
	}
	if err := root.KVv2("kv").Undelete(ctx, in.Path, []int{1}); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Write(ctx, in, owner); err != nil || out.Created || out.Version != 1 {
		t.Fatalf("after undelete: %+v %v", out, err)
	}
	if pw2, _, _ := s.Read(ctx, "kv", in.Path, owner); pw2 != pw1 {
		t.Fatal("the password changed across delete/undelete")
	}
	if err := root.KVv2("kv").Destroy(ctx, in.Path, []int{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, in, owner); !errors.As(err, &f) || f.Reason != "Conflict" || !strings.Contains(f.Message, "destroyed") {
		t.Fatalf("write on a destroyed version: %v", err)
	}
	if md, _ := root.KVv2("kv").GetMetadata(ctx, in.Path); md.CurrentVersion != 1 {
		t.Fatalf("a second version was written: %d", md.CurrentVersion)
	}
}

// TestCredentialFollowsEndpoint (issue 10 §3): when the Instance endpoint
// changes, the record gets a new version with the new connection fields and
// the same password; an unchanged intent writes nothing.
func TestCredentialFollowsEndpoint(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	in := dbcontract.CredentialIntent{Mount: "kv", Path: "postgresql-tenants/ns/moving", InstanceUID: "inst-1", Username: "moving", Database: "moving",
		Host: "db.home.arpa", HostAddr: "192.0.2.10", Port: 5432, SSLMode: "verify-full"}
	owner := openbao.Owner{InstanceUID: "inst-1", TenantUID: "tenant-1", Namespace: "ns", Name: "moving"}
	if _, err := s.Write(ctx, in, owner); err != nil {
		t.Fatal(err)
	}
	pw1, _, _ := s.Read(ctx, "kv", in.Path, owner)
	moved := in
	moved.Host, moved.HostAddr, moved.Port = "db2.home.arpa", "192.0.2.20", 6432
	moved.AlreadyIssued = true
	out, err := s.Write(ctx, moved, owner)
	if err != nil || out.Created || out.Version != 2 || strings.Join(out.Updated, ",") != "host,hostaddr,port" {
		t.Fatalf("endpoint change: %+v %v", out, err)
	}
	pw2, v2, _ := s.Read(ctx, "kv", in.Path, owner)
	if pw2 != pw1 || v2 != 2 {
		t.Fatalf("the password changed with the endpoint (v%d)", v2)
	}
	if again, err := s.Write(ctx, moved, owner); err != nil || again.Version != 2 || len(again.Updated) != 0 {
		t.Fatalf("unchanged endpoint wrote again: %+v %v", again, err)
	}
}
