package execution

import (
	"encoding/json"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// AdapterOf names the adapter an intent of the domain is for: the adapter
// field of its payload (EnsureIntent, ExecutionIntent); "" when the
// payload names none or is not JSON. Several adapters execute every
// operation of the domain, so its dispatcher routes by it
// (journal.Dispatcher.Route): an intent whose adapter runs in no process
// gets a Failed/UnknownOperation outcome instead of reaching another
// adapter's executor.
func AdapterOf(r journal.Record) string {
	var p struct {
		Adapter string `json:"adapter"`
	}
	if len(r.Payload) == 0 || json.Unmarshal(r.Payload, &p) != nil {
		return ""
	}
	return p.Adapter
}

// Route declares on d that every operation of the domain goes to the
// executor registered under the intent's adapter (AdapterOf). It must come
// before any executor registers its handlers.
func Route(d *journal.Dispatcher) error {
	for _, op := range Operations {
		if err := d.Route(op, AdapterOf); err != nil {
			return err
		}
	}
	return nil
}
