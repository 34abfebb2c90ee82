package execution

import (
	"encoding/json"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// NewDispatcher returns the dispatcher of the domain's durable consumer:
// every operation is routed to the adapter its payload names
// (EnsureIntent.Adapter, ExecutionIntent.Adapter; AdapterKubernetes when
// the payload names none, as intents of projectors before the OpenSandbox
// adapter did). Register each adapter's handlers with HandleAll under its
// adapter name. An intent of an adapter this process does not run gets no
// handler (a Failed/UnknownOperation outcome): every replica that consumes
// the domain's durable consumer must run the same adapters.
func NewDispatcher() (*journal.Dispatcher, error) {
	d, err := journal.NewDispatcher(Domain)
	if err != nil {
		return nil, err
	}
	for _, op := range Operations {
		if err := d.Route(op, AdapterOf); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// AdapterOf names the adapter an intent of the domain is for: its
// payload's "adapter" field, AdapterKubernetes when it has none.
func AdapterOf(intent journal.Record) string {
	var p struct {
		Adapter string `json:"adapter"`
	}
	if len(intent.Payload) > 0 && json.Unmarshal(intent.Payload, &p) == nil && p.Adapter != "" {
		return p.Adapter
	}
	return AdapterKubernetes
}
