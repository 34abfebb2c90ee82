package journal

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// WatchOutcomes streams every outcome of the given domain (subject token,
// see Domain; empty: all) appended after the call, until ctx is done.
// Projectors turn each record into a reconcile request for
// record.Object (namespace/name), for example through a controller-runtime
// channel source. Delivery is at-most-once per process start (an ordered
// consumer); projectors also reconcile every object on start, so nothing is
// missed across restarts.
func (s *Store) WatchOutcomes(ctx context.Context, domain string) (<-chan Record, error) {
	if domain == "" {
		domain = "*"
	}
	cons, err := s.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{fmt.Sprintf("%s.%s.*.%s", s.cfg.SubjectPrefix, domain, TypeOutcome)},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("journal: watch: %w", err)
	}
	out := make(chan Record, 256)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		r, err := DecodeRecord(m.Data(), md.Sequence.Stream)
		if err != nil {
			return
		}
		select {
		case out <- r:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return nil, fmt.Errorf("journal: watch: %w", err)
	}
	go func() {
		<-ctx.Done()
		cc.Stop()
		<-cc.Closed()
		close(out)
	}()
	return out, nil
}

// Follow delivers the records of one UID stored after afterSeq to fn, in
// order, until ctx is done (for `ayatori-journal timeline --follow`). A
// uid that is not a UID is an error wrapping ErrInvalidSubjectToken.
func (s *Store) Follow(ctx context.Context, uid string, afterSeq uint64, fn func(Record)) error {
	if err := ValidateUID(uid); err != nil {
		return fmt.Errorf("journal: uid %w", err)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.uidFilter(uid)}, DeliverPolicy: jetstream.DeliverNewPolicy}
	if afterSeq > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = afterSeq + 1
	}
	cons, err := s.stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("journal: follow: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		if r, err := DecodeRecord(m.Data(), md.Sequence.Stream); err == nil {
			fn(r)
		}
	})
	if err != nil {
		return fmt.Errorf("journal: follow: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}
