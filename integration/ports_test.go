package integration

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortIsOutsideTheEphemeralRange: a port FreePort hands out is not
// one the kernel can give an outgoing connection (a route dial of another
// NATS node, a docker-proxy) between the pick and the server's bind — ci on
// 9f8b274 lost TestConsumeSurvivesConsumerLeaderPartition to "bind: address
// already in use" on a route port — and never the same port twice.
func TestFreePortIsOutsideTheEphemeralRange(t *testing.T) {
	lo, hi, err := ephemeralRange()
	if err != nil {
		t.Skipf("no ephemeral port range to check against: %v", err)
	}
	seen := map[int]bool{}
	for range 200 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p >= lo && p <= hi {
			t.Fatalf("FreePort returned %d, inside the ephemeral range %d-%d", p, lo, hi)
		}
		if seen[p] {
			t.Fatalf("FreePort returned %d twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d from FreePort is not free: %v", p, err)
		}
		l.Close()
	}
}
