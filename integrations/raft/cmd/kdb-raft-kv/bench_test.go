package main

import (
	"fmt"
	"image/color"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// TestClusterBench measures the example cluster on loopback: acknowledged
// writes per second (entries/s) with 1 and 16 clients writing 100-byte
// values to the leader, with kdb's store and with raft-boltdb's (the FSM is
// the same kdb store in both), and the time a killed follower takes to
// rejoin (open, then catch up on what the others committed meanwhile).
// Configurations are interleaved in rounds so that each comparison runs
// at nearly the same moment:
//
//	KDB_RAFT_CLUSTER_BENCH=1 go test -run ClusterBench -v -timeout 30m ./cmd/kdb-raft-kv
//
// KDB_RAFT_CLUSTER_BENCH_ROUNDS (default 3) and _SECONDS (default 8) set
// the rounds and the measuring time; the markdown table is printed and the
// plot written to KDB_RAFT_PLOT (default cluster-bench.png in the module).
func TestClusterBench(t *testing.T) {
	if os.Getenv("KDB_RAFT_CLUSTER_BENCH") == "" {
		t.Skip("benchmark: set KDB_RAFT_CLUSTER_BENCH=1")
	}
	rounds, secs := 3, 8
	if v, err := strconv.Atoi(os.Getenv("KDB_RAFT_CLUSTER_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	if v, err := strconv.Atoi(os.Getenv("KDB_RAFT_CLUSTER_BENCH_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	stores := []string{"kdb", "boltdb"}
	clients := []int{1, 16}
	rate := map[string][]float64{}                                  // "store/clients" -> entries/s per round
	open, rejoinT := map[string][]float64{}, map[string][]float64{} // store -> seconds
	for r := range rounds {
		for _, st := range stores {
			for _, n := range clients {
				v := throughput(t, st, n, time.Duration(secs)*time.Second)
				k := fmt.Sprintf("%s/%d", st, n)
				rate[k] = append(rate[k], v)
				t.Logf("round %d: %s, %d clients: %.0f entries/s", r+1, st, n, v)
			}
			o, c := rejoinTime(t, st)
			open[st], rejoinT[st] = append(open[st], o.Seconds()), append(rejoinT[st], c.Seconds())
			t.Logf("round %d: %s: follower open %v, rejoined in %v", r+1, st, o.Round(time.Millisecond), c.Round(time.Millisecond))
		}
	}
	med := func(v []float64) float64 { c := slices.Clone(v); slices.Sort(c); return c[len(c)/2] }
	var out strings.Builder
	fmt.Fprintf(&out, "%d interleaved rounds of %d s each; median (min–max)\n\n", rounds, secs)
	out.WriteString("| store | 1 client, entries/s | 16 clients, entries/s | follower open | follower rejoin (open + catch-up) |\n|---|---|---|---|---|\n")
	for _, st := range stores {
		a, b := rate[st+"/1"], rate[st+"/16"]
		fmt.Fprintf(&out, "| %s | %.0f (%.0f–%.0f) | %.0f (%.0f–%.0f) | %.0f ms (%.0f–%.0f) | %.0f ms (%.0f–%.0f) |\n", st,
			med(a), slices.Min(a), slices.Max(a), med(b), slices.Min(b), slices.Max(b),
			1e3*med(open[st]), 1e3*slices.Min(open[st]), 1e3*slices.Max(open[st]),
			1e3*med(rejoinT[st]), 1e3*slices.Min(rejoinT[st]), 1e3*slices.Max(rejoinT[st]))
	}
	var q1, q16 []float64
	for i := range rounds {
		q1 = append(q1, rate["kdb/1"][i]/rate["boltdb/1"][i])
		q16 = append(q16, rate["kdb/16"][i]/rate["boltdb/16"][i])
	}
	fmt.Fprintf(&out, "\nkdb ÷ raft-boltdb per round: 1 client %.2f (%.2f–%.2f), 16 clients %.2f (%.2f–%.2f)\n",
		med(q1), slices.Min(q1), slices.Max(q1), med(q16), slices.Min(q16), slices.Max(q16))
	fmt.Println(out.String())

	path := os.Getenv("KDB_RAFT_PLOT")
	if path == "" {
		path = "../../cluster-bench.png"
	}
	if err := plotBench(path, stores, clients, rate, med); err != nil {
		t.Fatal(err)
	}
	t.Logf("plot written to %s", path)
}

// throughput runs n clients against the leader of a fresh cluster for d
// and returns the acknowledged writes per second.
func throughput(t *testing.T, store string, n int, d time.Duration) float64 {
	c := newCluster(t, 3, "-store", store)
	l := c.leader(20 * time.Second)
	var acked atomic.Int64
	var measuring atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	val := []byte(strings.Repeat("v", 100))
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				if c.put(l, fmt.Sprintf("c%02d-%08d", g, seq), val) && measuring.Load() {
					acked.Add(1)
				}
			}
		}()
	}
	time.Sleep(time.Second) // warm-up
	measuring.Store(true)
	t0 := time.Now()
	time.Sleep(d)
	measuring.Store(false)
	el := time.Since(t0)
	close(stop)
	wg.Wait()
	for i := range c.peers {
		c.stop(i)
	}
	if f := c.failures(); len(f) > 0 {
		t.Fatalf("%v", f)
	}
	return float64(acked.Load()) / el.Seconds()
}

// rejoinTime kills a follower of a cluster under load, writes on for 5 s,
// restarts it and returns how long it took to open (answer HTTP) and to
// apply what the leader had committed when it restarted.
func rejoinTime(t *testing.T, store string) (open, rejoin time.Duration) {
	c := newCluster(t, 3, "-store", store)
	l := c.leader(20 * time.Second)
	w := c.startWriters(4, func(int) int { return 100 })
	time.Sleep(3 * time.Second)
	f := (l + 1) % 3
	c.kill(f)
	time.Sleep(5 * time.Second)
	r := c.restart(f, "follower")
	w.halt()
	for i := range c.peers {
		c.stop(i)
	}
	return r.open, r.catchup
}

func plotBench(path string, stores []string, clients []int, rate map[string][]float64, med func([]float64) float64) error {
	p := plot.New()
	p.Title.Text = "kdb-raft-kv, 3 nodes on loopback (median of rounds)"
	p.Y.Label.Text = "acknowledged entries/s"
	w := vg.Points(22)
	colors := []color.Color{color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 255, G: 127, B: 14, A: 255}}
	var names []string
	for _, n := range clients {
		names = append(names, fmt.Sprintf("%d client(s)", n))
	}
	for i, st := range stores {
		var vals plotter.Values
		for _, n := range clients {
			vals = append(vals, med(rate[fmt.Sprintf("%s/%d", st, n)]))
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Color = colors[i]
		bars.LineStyle.Width = 0
		bars.Offset = w * vg.Length(2*i-1) / 2
		p.Add(bars)
		p.Legend.Add(st, bars)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(clients))-0.5
	p.Y.Max *= 1.25 // room for the legend above the bars
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}
