package execution

import (
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// NewDispatcher returns the dispatcher of the domain's durable consumer.
func NewDispatcher() (*journal.Dispatcher, error) {
	return journal.NewDispatcher(Domain)
}
