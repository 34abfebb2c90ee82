package main

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// The CLI's only domain knowledge: which contract describes a record and
// compares a live object. What a payload means and how a live object is
// compared with its journal is the domain contract's (contracts/<domain>).

// describe is the domain's one-line summary of r's payload ("" if none).
func describe(r journal.Record) string {
	if d, _ := journal.Domain(r.Object.Group); d == execution.Domain {
		return execution.Describe(r)
	}
	return ""
}

// compareDomainLive compares the live object (nil: not found) with its
// records when its domain has its own comparison (ok false otherwise: the
// generic Ready/generation comparison applies).
func compareDomainLive(o journal.ObjectRef, live *unstructured.Unstructured, recs []journal.Record) (*execution.LiveComparison, bool) {
	if d, _ := journal.Domain(o.Group); d == execution.Domain {
		c := execution.CompareLive(live, o.UID, recs)
		return &c, true
	}
	return nil, false
}

// summarizeObject is the domain's one line on an object's state from its
// records ("" if none).
func summarizeObject(o journal.ObjectRef, recs []journal.Record) string {
	if d, _ := journal.Domain(o.Group); d == execution.Domain {
		return execution.Summary(recs)
	}
	return ""
}
