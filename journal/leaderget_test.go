package journal

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// TestLeaderGetRetriesAnElectionAnswer: a message get answered with the
// error a leader election gives (10008, JetStream system temporarily
// unavailable, in the reply's body rather than as a request error) is sent
// again like an unanswered one; a final answer (10037 no message found)
// is not. make test on the review branch of 2026-12-07:
// TestAppendInFlightOutlivesItsStreamLeader's Read failed with 10008 in
// 6 s, while the meta leader it killed was being replaced.
func TestLeaderGetRetriesAnElectionAnswer(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)

	var asked atomic.Int32
	sub, err := nc.Subscribe("$JS.API.STREAM.MSG.GET.S", func(m *nats.Msg) {
		var reply any
		switch n := asked.Add(1); {
		case n <= 2:
			reply = map[string]any{"error": map[string]any{"code": 503, "err_code": 10008, "description": "JetStream system temporarily unavailable"}}
		default:
			reply = map[string]any{"message": map[string]any{"subject": "a.b", "seq": 7, "data": []byte("{}")}}
		}
		b, _ := json.Marshal(reply)
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	s := &Store{nc: nc}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := s.lastOf(ctx, "S", "a.b")
	if err != nil {
		t.Fatalf("lastOf after two election answers: %v (asked %d times)", err, asked.Load())
	}
	if m == nil || m.seq != 7 || asked.Load() != 3 {
		t.Fatalf("lastOf = %+v after %d requests, want sequence 7 after 3", m, asked.Load())
	}

	// A final answer ends the read at once.
	sub2, err := nc.Subscribe("$JS.API.STREAM.MSG.GET.T", func(m *nats.Msg) {
		asked.Add(1)
		_ = m.Respond([]byte(`{"error":{"code":404,"err_code":10037,"description":"no message found"}}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub2.Unsubscribe() })
	asked.Store(0)
	if m, err := s.lastOf(ctx, "T", "a.b"); err != nil || m != nil || asked.Load() != 1 {
		t.Fatalf("lastOf on no message = %+v, %v after %d requests, want nil, nil after 1", m, err, asked.Load())
	}
}
