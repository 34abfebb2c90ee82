package journal

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// realisticView returns n decoded records shaped like a settled Tenant's:
// signed intents and outcomes with a small payload.
func realisticView(t *testing.T, uid string, n int) []Record {
	t.Helper()
	obj := ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "team-a", Name: "netbox", UID: uid, Generation: 1}
	recs := make([]Record, 0, n)
	for i := 0; i < n; i++ {
		r, err := NewIntent(obj, "ObserveSomething", "", i+1, map[string]string{"instance": "pg-main", "database": "netbox", "role": "netbox_owner"})
		if err != nil {
			t.Fatal(err)
		}
		r.Actor, r.Time = "ayatori-manager-7c9f", time.Now().UTC()
		r.Proof = &Proof{KeyID: "k-2f1c9a0b", Signature: make([]byte, 64)}
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		d, err := DecodeRecord(data, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, d)
	}
	return recs
}

// TestViewCacheIsBoundedByBytes: the View cache was bounded by its number
// of objects only (10,000), so settled objects' Views, tens of KiB each,
// could grow it past the manager's memory limit; and an expired entry was
// only removed when its UID was read again. Now its estimated bytes stay
// within Config.ViewCacheBytes, expired entries go first, a View too large
// for the cache is not kept, and the estimate is not below half of what
// the records really take on the heap.
func TestViewCacheIsBoundedByBytes(t *testing.T) {
	const budget = 1 << 20
	s := &Store{views: map[string]*viewEntry{}, cfg: Config{ViewCacheBytes: budget, MaxAge: 24 * time.Hour}}
	view := realisticView(t, "u", 40)
	one := viewFootprint(view)
	if one <= 0 {
		t.Fatal("no footprint")
	}
	sum := func() (n int) {
		for _, e := range s.views {
			n += e.bytes
		}
		return n
	}
	// Expired entries first.
	for i := 0; i < 3; i++ {
		uid := fmt.Sprintf("old-%d", i)
		s.swapView(uid, nil, &viewEntry{v: View{UID: uid, Records: view}, filled: time.Now().Add(-time.Hour)})
	}
	for i := 0; i < 10*budget/one; i++ {
		uid := fmt.Sprintf("uid-%d", i)
		s.swapView(uid, nil, &viewEntry{v: View{UID: uid, Records: view}, filled: time.Now()})
		if s.viewBytes > budget || s.viewBytes != sum() {
			t.Fatalf("after %d Views of %d bytes: %d bytes counted, %d held, bound %d", i+1, one, s.viewBytes, sum(), budget)
		}
		if _, ok := s.views[uid]; !ok {
			t.Fatalf("View %d not kept", i)
		}
	}
	for i := 0; i < 3; i++ {
		if _, ok := s.views[fmt.Sprintf("old-%d", i)]; ok {
			t.Errorf("expired entry old-%d outlived the evictions", i)
		}
	}
	// Replacing and dropping keep the count right.
	for uid, e := range s.views {
		s.swapView(uid, e, &viewEntry{v: View{UID: uid, Records: view[:1]}, filled: time.Now()})
		s.forgetView(uid)
		break
	}
	if s.viewBytes != sum() {
		t.Fatalf("%d bytes counted, %d held", s.viewBytes, sum())
	}
	// A View larger than a quarter of the bound is read again, not kept.
	big := realisticView(t, "big", 40*(budget/4/one+1))
	s.swapView("big", nil, &viewEntry{v: View{UID: "big", Records: big}, filled: time.Now()})
	if _, ok := s.views["big"]; ok {
		t.Errorf("a View of %d bytes kept under a bound of %d", viewFootprint(big), budget)
	}
	// The estimate against the heap.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	held := make([][]Record, 50)
	for i := range held {
		held[i] = realisticView(t, fmt.Sprintf("heap-%d", i), 40)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int(after.HeapAlloc) - int(before.HeapAlloc)
	est := 0
	for _, v := range held {
		est += viewFootprint(v)
	}
	runtime.KeepAlive(held)
	t.Logf("estimate %d bytes for %d records held in %d heap bytes", est, 50*40, heap)
	if est < heap/2 {
		t.Errorf("estimate %d bytes, the heap holds %d: more than twice the estimate", est, heap)
	}
}
