// Command bench is `make bench`: N PostgreSQLTenants on one Instance through
// the real local stack. It prints time until all are Ready (p50/p99 per
// Tenant and total), the manager's peak RSS, the peak number of PostgreSQL
// connections the manager holds (bounded by the pool, not by N), and the
// journal's share of the time from the manager's own metrics.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

func main() {
	n := flag.Int("n", 100, "number of Tenants")
	timeout := flag.Duration("timeout", 60*time.Minute, "give up after")
	flag.Parse()
	if err := run(*n, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "bench FAILED:", err)
		os.Exit(1)
	}
}

func run(n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s, err := integration.StartStack(ctx, integration.StackOptions{ManagerArgs: []string{"--tenant-resync-interval=24h", "--executor-concurrency=8"}})
	if err != nil {
		return err
	}
	defer s.Close()
	c := s.CP.Client
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "admin", Namespace: integration.ControllerNamespace},
		StringData: map[string]string{"username": s.AdminUser, "password": s.AdminPassword}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &v1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Spec: v1alpha1.PostgreSQLInstanceSpec{
		Endpoint:           v1alpha1.PostgreSQLEndpoint{Host: "localhost", HostAddr: "127.0.0.1", Port: int32(s.PG.Port)},
		AdminCredentialRef: v1alpha1.AdminCredentialReference{Name: "admin"}}}); err != nil {
		return err
	}
	for {
		i := &v1alpha1.PostgreSQLInstance{}
		if err := c.Get(ctx, types.NamespacedName{Name: "shared"}, i); err == nil && i.Status.Phase == v1alpha1.InstancePhaseReady {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
		return err
	}
	var peakRSS, peakConns int64
	var mu sync.Mutex
	stopSampling := make(chan struct{})
	go sample(s, &mu, &peakRSS, &peakConns, stopSampling)

	start := time.Now()
	created := map[string]time.Time{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("t%05d", i)
		created[name] = time.Now()
		if err := c.Create(ctx, &v1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name},
			Spec: v1alpha1.PostgreSQLTenantSpec{InstanceRef: "shared"}}); err != nil {
			return err
		}
	}
	fmt.Printf("created %d Tenants in %s\n", n, time.Since(start).Round(time.Millisecond))
	readyAt := map[string]time.Time{}
	for len(readyAt) < n {
		var list v1alpha1.PostgreSQLTenantList
		if err := c.List(ctx, &list, client.InNamespace("bench")); err != nil {
			return err
		}
		now := time.Now()
		for _, t := range list.Items {
			if _, done := readyAt[t.Name]; done {
				continue
			}
			for _, cond := range t.Status.Conditions {
				if cond.Type == "Ready" && cond.Status == metav1.ConditionTrue {
					readyAt[t.Name] = now
				}
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%d of %d Ready after %s", len(readyAt), n, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
	total := time.Since(start)
	close(stopSampling)
	var lat []time.Duration
	for name, at := range readyAt {
		lat = append(lat, at.Sub(created[name]))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))].Round(10 * time.Millisecond) }
	appendSum, appendCount, deliverySum, deliveryCount := journalMetrics(s.MetricsURL)
	mu.Lock()
	defer mu.Unlock()
	fmt.Printf("\nN=%d Tenants on one Instance (local stack, 2 vCPU)\n", n)
	fmt.Printf("  all Ready after          %s  (%.1f Tenants/s)\n", total.Round(10*time.Millisecond), float64(n)/total.Seconds())
	fmt.Printf("  per Tenant create→Ready  p50 %s  p99 %s  max %s\n", pct(0.50), pct(0.99), lat[len(lat)-1].Round(10*time.Millisecond))
	fmt.Printf("  manager peak RSS         %.1f MiB\n", float64(peakRSS)/1024)
	fmt.Printf("  peak PostgreSQL connections of the manager: %d (pool max 4 + short-lived per-tenant logins)\n", peakConns)
	fmt.Printf("  journal appends          %d, mean %.2f ms, total %.1f s\n", int(appendCount), 1000*appendSum/max(appendCount, 1), appendSum)
	fmt.Printf("  intent delivery          %d, mean %.2f ms, total %.1f s\n", int(deliveryCount), 1000*deliverySum/max(deliveryCount, 1), deliverySum)
	fmt.Printf("  journal share            append+delivery time / (N x mean create→Ready) = %.1f%%\n",
		100*(appendSum+deliverySum)/(float64(n)*meanSeconds(lat)))
	return nil
}

func meanSeconds(d []time.Duration) float64 {
	var s float64
	for _, x := range d {
		s += x.Seconds()
	}
	return s / float64(len(d))
}

func sample(s *integration.Stack, mu *sync.Mutex, rss, conns *int64, stop chan struct{}) {
	ctx := context.Background()
	db, err := pgx.Connect(ctx, s.PG.SuperuserDSN("postgres"))
	if err != nil {
		return
	}
	defer db.Close(ctx)
	for {
		select {
		case <-stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
		var n int64
		_ = db.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ayatori-manager'").Scan(&n)
		r := readRSS(s.ManagerPID())
		mu.Lock()
		*conns = max(*conns, n)
		*rss = max(*rss, r)
		mu.Unlock()
	}
}

// readRSS returns VmRSS of a process in KiB.
func readRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "VmRSS:") {
			fields := strings.Fields(sc.Text())
			v, _ := strconv.ParseInt(fields[1], 10, 64)
			return v
		}
	}
	return 0
}

func journalMetrics(url string) (appendSum, appendCount, deliverySum, deliveryCount float64) {
	resp, err := http.Get(url)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "ayatori_journal_append_seconds_sum":
			appendSum = v
		case "ayatori_journal_append_seconds_count":
			appendCount = v
		case "ayatori_journal_intent_delivery_seconds_sum":
			deliverySum = v
		case "ayatori_journal_intent_delivery_seconds_count":
			deliveryCount = v
		}
	}
	return
}
