package journal

import (
	"context"
	"fmt"
	"time"

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
		if s.admitStored(m.Subject(), m.Data(), &r) != nil {
			s.cfg.Metrics.countUntrusted("watch")
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
// order, until ctx is done (for `ayatori-journal timeline --follow`); a
// record that does not decode or (with Config.Trust) has no valid proof is
// delivered with the error, as Scan does. A store opened with OpenExisting
// polls with direct gets every FollowInterval (it may create no
// consumer). A uid that is not a UID is an error wrapping
// ErrInvalidSubjectToken.
func (s *Store) Follow(ctx context.Context, uid string, afterSeq uint64, fn func(Record, error)) error {
	if err := ValidateUID(uid); err != nil {
		return fmt.Errorf("journal: uid %w", err)
	}
	deliver := func(m storedMsg) error {
		fn(s.decodeStored(m))
		return nil
	}
	if s.readOnly {
		return s.followDirect(ctx, uid, afterSeq, deliver)
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
		_ = deliver(storedMsg{subject: m.Subject(), data: m.Data(), hdr: m.Headers(), seq: md.Sequence.Stream})
	})
	if err != nil {
		return fmt.Errorf("journal: follow: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}

// FollowInterval is how often Follow on a read-only store looks for new
// records.
var FollowInterval = 500 * time.Millisecond

func (s *Store) followDirect(ctx context.Context, uid string, afterSeq uint64, deliver func(storedMsg) error) error {
	next := afterSeq + 1
	if afterSeq == 0 {
		// Only what is stored from now on.
		last, err := s.lastSeq(ctx, uid)
		if err != nil {
			return fmt.Errorf("journal: follow: %w", err)
		}
		next = last + 1
	}
	t := time.NewTicker(FollowInterval)
	defer t.Stop()
	for {
		last, err := s.lastSeq(ctx, uid)
		if err == nil && last >= next {
			err = s.eachMsgDirect(ctx, s.stream, s.uidFilter(uid), next, last, func(m storedMsg) error {
				next = m.seq + 1
				return deliver(m)
			})
		}
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("journal: follow: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
