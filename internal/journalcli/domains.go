package journalcli

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// The CLI has no domain knowledge: each domain contract registers its
// journal.Describer (contracts/<domain>/register.go), linked by the
// contracts package.

// describe is the domain's one-line summary of r's payload ("" if none).
func describe(r journal.Record) string {
	if d, ok := journal.DescriberOf(r.Object.Group); ok && d.Describe != nil {
		return d.Describe(r)
	}
	return ""
}

// compareDomainLive compares the live object (nil: not found) with its
// records when its domain has its own comparison (ok false otherwise: the
// generic Ready/generation comparison applies).
func compareDomainLive(o journal.ObjectRef, live *unstructured.Unstructured, recs []journal.Record) (found bool, mismatches []string, detail any, ok bool) {
	d, ok := journal.DescriberOf(o.Group)
	if !ok || d.CompareLive == nil {
		return false, nil, nil, false
	}
	var obj map[string]any
	if live != nil {
		obj = live.Object
	}
	found, mismatches, detail = d.CompareLive(obj, o.UID, recs)
	return found, mismatches, detail, true
}

// summarizeObject is the domain's one line on an object's state from its
// records ("" if none).
func summarizeObject(o journal.ObjectRef, recs []journal.Record) string {
	if d, ok := journal.DescriberOf(o.Group); ok && d.Summary != nil {
		return d.Summary(recs)
	}
	return ""
}
