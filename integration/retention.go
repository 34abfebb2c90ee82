package integration

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// AgeOutJournal makes retention remove uid's journal records for real, as
// the manager identity (which may update the journal stream but not purge
// it): it lowers the stream's MaxAge to one second, waits until none of
// uid's records are left, and restores the stream's settings. Every other
// record older than a second goes too, as it would once MaxAge passed;
// tests use it on a stack where only uid's object is active.
func AgeOutJournal(ctx context.Context, nc *nats.Conn, uid string) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	str, err := js.Stream(ctx, journal.DefaultStreamName)
	if err != nil {
		return err
	}
	orig := str.CachedInfo().Config
	short := orig
	short.MaxAge, short.Duplicates = time.Second, time.Second
	if _, err := js.UpdateStream(ctx, short); err != nil {
		return fmt.Errorf("lower MaxAge: %w", err)
	}
	defer func() { _, _ = js.UpdateStream(context.WithoutCancel(ctx), orig) }()
	filter := journal.DefaultSubjectPrefix + ".*." + uid + ".*"
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		info, err := str.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err == nil && len(info.State.Subjects) == 0 {
			_, err = js.UpdateStream(ctx, orig)
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("uid %s still has journal records after 30 s of MaxAge 1s", uid)
}
