package database

// Checkpoint compaction (journal.Compact) must not change a decision
// input: each test computes one from the full history and from its
// compaction (found by a hostile review).

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

type history12 struct {
	obj      journal.ObjectRef
	recs     []journal.Record
	attempts map[string]int
}

func newHistory12() *history12 {
	return &history12{obj: journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "ns", Name: "app", UID: "t-1", Generation: 1},
		attempts: map[string]int{}}
}

func (b *history12) step(op string, class journal.ResultClass, payload any) {
	b.attempts[op]++
	in, _ := journal.NewIntent(b.obj, op, "", b.attempts[op], nil)
	in.Sequence, in.Time = uint64(len(b.recs)+1), t0.Add(time.Duration(len(b.recs))*time.Minute)
	b.recs = append(b.recs, in)
	out, _ := journal.NewOutcome(in, journal.Result{Class: class}, payload)
	out.Sequence, out.Time = uint64(len(b.recs)+1), in.Time
	b.recs = append(b.recs, out)
}

// ownedExternalSecrets is the union of every ExternalSecret UID this
// Tenant ever created (contracts/database/tenant.go: "even when that
// ExternalSecret no longer exists"), but Compact keeps only the 8 latest
// EnsureExternalSecret intents and the latest success: an ExternalSecret
// recreated once (UID A -> B) and re-ensured 8 times (one per Revalidate)
// loses A. A Secret produced by A is then a Conflict before
// EnsureExternalSecret and is left in place by DeleteExternalSecret
// (OwnedES payload), where the full history deletes it.
func TestCompactKeepsOwnedExternalSecrets(t *testing.T) {
	b := newHistory12()
	esA := dbcontract.ESRef{UID: "es-A", Created: t0.Unix()}
	esB := dbcontract.ESRef{UID: "es-B", Created: t0.Add(time.Hour).Unix()}
	b.step(dbcontract.OpEnsureExternalSecret, journal.Succeeded, dbcontract.ProjectionOutcome{ES: &esA})
	for i := 0; i < journal.CheckpointKeep; i++ {
		b.step(dbcontract.OpEnsureExternalSecret, journal.Succeeded, dbcontract.ProjectionOutcome{ES: &esB})
	}
	full := ownedExternalSecrets(journal.Fold(b.recs))
	comp := ownedExternalSecrets(journal.Fold(journal.Compact(b.recs)))
	// The target Secret ESO wrote for A (created after A, owner A).
	secret := &metav1.ObjectMeta{Name: "app-credentials", Namespace: "ns", UID: types.UID("s-1"),
		CreationTimestamp: metav1.NewTime(t0.Add(time.Minute)),
		OwnerReferences:   []metav1.OwnerReference{{APIVersion: "external-secrets.io/v1beta1", Kind: dbcontract.ExternalSecretGVK.Kind, Name: "app", UID: "es-A"}}}
	fullTaken := dbcontract.TargetTaken("ns", "app", "app-credentials", nil, secret, "t-1", full)
	compTaken := dbcontract.TargetTaken("ns", "app", "app-credentials", nil, secret, "t-1", comp)
	if len(full) != len(comp) || fullTaken != compTaken || dbcontract.ProducedBy(secret, full) != dbcontract.ProducedBy(secret, comp) {
		t.Fatalf("compaction changed the owned ExternalSecrets: full %v, compacted %v\n TargetTaken full %q\n TargetTaken compacted %q\n ProducedBy (DeleteExternalSecret deletes the Secret) full %v, compacted %v",
			full, comp, fullTaken, compTaken, dbcontract.ProducedBy(secret, full), dbcontract.ProducedBy(secret, comp))
	}
}

// Weaker precondition: 8 later WriteCredential intents, one of them
// a success, and no CreateRole ever decided): passwordIssued reads the
// Created=true outcome, which Compact drops once a later success exists
// and 8 later intents exist. The next WriteCredential intent then says
// AlreadyIssued=false (a second password may be generated).
func TestCompactKeepsPasswordIssued(t *testing.T) {
	b := newHistory12()
	b.step(dbcontract.OpWriteCredential, journal.Succeeded, dbcontract.CredentialOutcome{Path: "p", Version: 1, Created: true})
	for i := 0; i < journal.CheckpointKeep-1; i++ {
		b.step(dbcontract.OpWriteCredential, journal.Failed, nil)
	}
	b.step(dbcontract.OpWriteCredential, journal.Succeeded, dbcontract.CredentialOutcome{Path: "p", Version: 2})
	full := passwordIssued(journal.Fold(b.recs))
	comp := passwordIssued(journal.Fold(journal.Compact(b.recs)))
	if full != comp {
		t.Fatalf("passwordIssued: full history %v, compacted %v", full, comp)
	}
}
