package journal

import (
	"time"

	"github.com/nats-io/nats.go"
)

// ClientPingInterval is how often a journal client pings its server. With
// two pings outstanding allowed, a server that stops answering without
// closing the connection (a network partition, a frozen host) is declared
// stale after at most three intervals, and the client reconnects to
// another server of its URL list (docs/journal.md "R3 cluster"). The
// client library's default (2 minutes, so 4-6 minutes to notice) would
// keep a manager stuck on a partitioned server for that long.
const ClientPingInterval = 5 * time.Second

// ClientOptions are the NATS connection options of a long-running journal
// client (the manager): reconnect forever, one second between attempts on
// one server, and pings every ClientPingInterval. Give nats.Connect every
// server's URL, comma-separated; the client also learns the cluster's
// other servers from the one it reaches.
func ClientOptions(name string) []nats.Option {
	return []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second),
		nats.PingInterval(ClientPingInterval), nats.MaxPingsOutstanding(2)}
}
