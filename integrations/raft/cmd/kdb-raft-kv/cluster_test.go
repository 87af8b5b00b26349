package main

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
	raftkdb "github.com/kdb-project/kdb/integrations/raft"
	"github.com/kdb-project/kdb/integrations/raft/kvfsm"
)

// testArgs make snapshots frequent and the log short, so that a node that
// was down long enough is rebuilt from a snapshot.
var testArgs = []string{"-snapshot-threshold", "400", "-snapshot-interval", "500ms", "-trailing-logs", "200"}

// valueSize: every third value is 1.5 KiB, kept in kdb's journal (over the
// 512-byte ValueThreshold) both as a raft entry and as the FSM's value.
func valueSize(seq int) int {
	if seq%3 == 0 {
		return 1500
	}
	return 16 + seq%80
}

type rejoin struct {
	kind          string
	open, catchup time.Duration
}

// restart starts node i again and waits until it has applied everything
// the leader had committed when it started (its rejoin).
func (c *cluster) restart(i int, kind string) rejoin {
	c.t.Helper()
	var target uint64
	for j := range c.peers {
		if s, err := c.status(j); err == nil && j != i && s.CommitIndex > target {
			target = s.CommitIndex
		}
	}
	t0 := time.Now()
	c.start(i)
	var open time.Duration
	deadline := t0.Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s did not rejoin within 60 s (target index %d); failures %v\n%s",
				c.peers[i].id, target, c.failures(), c.logTail(i))
		}
		s, err := c.status(i)
		if err == nil {
			if open == 0 {
				open = time.Since(t0)
			}
			if s.Applied >= target {
				return rejoin{kind: kind, open: open, catchup: time.Since(t0)}
			}
		}
		if f := c.failures(); len(f) > 0 {
			c.t.Fatalf("%v\n%s", f, c.logTail(i))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCluster_KillLeaderAndFollower: three nodes, clients writing
// continuously, the leader and a follower SIGKILLed at random moments and
// restarted; then a follower kept down until the others have snapshotted
// past its log, so that it is rebuilt from a snapshot (kdb Export/Import).
// Every write the cluster acknowledged must be on every node, every store
// must open and pass kdb.Check.
func TestCluster_KillLeaderAndFollower(t *testing.T) {
	kills := 10
	if testing.Short() {
		kills = 3
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	c := newCluster(t, 3, testArgs...)
	c.leader(20 * time.Second)
	w := c.startWriters(4, valueSize)
	var rejoins []rejoin
	leaderKills, followerKills := 0, 0
	for k := 0; k < 2*kills; k++ {
		time.Sleep(time.Duration(200+rng.IntN(1300)) * time.Millisecond)
		l := c.leader(20 * time.Second)
		victim, kind := l, "leader"
		if k%2 == 1 {
			victim, kind = (l+1+rng.IntN(2))%3, "follower"
			followerKills++
		} else {
			leaderKills++
		}
		before := w.count()
		c.kill(victim)
		time.Sleep(time.Duration(rng.IntN(800)) * time.Millisecond)
		r := c.restart(victim, kind)
		rejoins = append(rejoins, r)
		t.Logf("kill %d: %s %s; acknowledged %d -> %d; open %v, rejoined in %v",
			k+1, kind, c.peers[victim].id, before, w.count(), r.open.Round(time.Millisecond), r.catchup.Round(time.Millisecond))
	}

	// A follower far behind: down while the others snapshot past its log.
	l := c.leader(20 * time.Second)
	far := (l + 1) % 3
	fs, err := c.status(far)
	if err != nil {
		t.Fatal(err)
	}
	c.kill(far)
	followerKills++
	// What the follower holds is at most what the leader held when it
	// died (its status, read before the kill, may lag what it appended
	// after: then the log alone could catch it up, and no snapshot is
	// needed).
	if ls, err := c.status(l); err == nil && ls.LastIndex > fs.LastIndex {
		fs.LastIndex = ls.LastIndex
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		// The leader's log must have been compacted past the follower's
		// (raft records the snapshot a moment before it deletes the
		// entries, and a new leader has its own snapshots): only then is
		// the follower rebuilt from a snapshot rather than from the log.
		s, err := c.status(l)
		if err == nil && s.State == "Leader" && s.SnapshotIdx > fs.LastIndex+400 && s.FirstIndex > fs.LastIndex+1 {
			break
		}
		if err != nil || s.State != "Leader" {
			l = c.leader(20 * time.Second)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader took no snapshot and compaction past index %d within 90 s", fs.LastIndex+400)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := c.restart(far, "far-behind follower")
	rejoins = append(rejoins, r)
	s, _ := c.status(far)
	if s.Restores == 0 {
		t.Fatalf("%s was down from index %d while the leader snapshotted past it, yet restored no snapshot", c.peers[far].id, fs.LastIndex)
	}
	t.Logf("far-behind %s (down at index %d): %d snapshot restore(s), open %v, rejoined in %v",
		c.peers[far].id, fs.LastIndex, s.Restores, r.open.Round(time.Millisecond), r.catchup.Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond)
	w.halt()

	// Convergence: every node applies the leader's last commit.
	l = c.leader(20 * time.Second)
	ls, err := c.status(l)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.peers {
		if _, ok := c.caughtUp(i, ls.CommitIndex, 60*time.Second); !ok {
			t.Fatalf("%s did not apply index %d within 60 s\n%s", c.peers[i].id, ls.CommitIndex, c.logTail(i))
		}
	}
	if f := c.failures(); len(f) > 0 {
		t.Fatalf("nodes failed: %v", f)
	}
	for i := range c.peers {
		c.stop(i)
	}
	lost := 0
	for i := range c.peers {
		lost += verifyNode(t, c.nodeDir(i), c.peers[i].id, w.acked)
	}
	printRejoins(t, rejoins)
	fmt.Printf("kills=%d (leader %d, follower %d) acknowledged=%d sent=%d lost=%d\n",
		leaderKills+followerKills, leaderKills, followerKills, len(w.acked), w.sent, lost)
	if lost > 0 {
		t.Fatalf("lost=%d", lost)
	}
	if len(w.acked) < 100 {
		t.Fatalf("only %d writes acknowledged: the test did not exercise the cluster", len(w.acked))
	}
}

// verifyNode opens a stopped node's store, checks it (kdb.Check, every raft
// entry decodable) and counts the acknowledged writes missing or different.
func verifyNode(t *testing.T, dir, id string, acked map[string][]byte) int {
	t.Helper()
	db, err := kdb.Open(filepath.Join(dir, "kdb"), nil)
	if err != nil {
		t.Fatalf("%s: open: %v", id, err)
	}
	defer db.Close()
	if _, err := db.Check(); err != nil {
		t.Fatalf("%s: kdb.Check: %v", id, err)
	}
	s, err := raftkdb.New(db, raftkdb.DefaultNamespace)
	if err != nil {
		t.Fatalf("%s: raft store: %v", id, err)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	// Every entry decodes. A node rebuilt from a snapshot keeps its older
	// entries until the next compaction, with a gap up to the snapshot (how
	// raft marks the discontinuity for a store that is not a
	// MonotonicLogStore): at most one run of missing indexes is allowed.
	var missing []uint64
	for i := first; i <= last && last > 0; i++ {
		var e raft.Log
		err := s.GetLog(i, &e)
		if err == raft.ErrLogNotFound {
			if len(missing) > 0 && missing[len(missing)-1] != i-1 {
				t.Fatalf("%s: raft log %d..%d has more than one gap (%d, then %d)", id, first, last, missing[len(missing)-1], i)
			}
			missing = append(missing, i)
			continue
		}
		if err != nil || e.Index != i {
			t.Fatalf("%s: raft log %d..%d: entry %d: %v", id, first, last, i, err)
		}
	}
	if len(missing) > 0 {
		t.Logf("%s: raft log gap %d..%d (entries kept from before a snapshot install)", id, missing[0], missing[len(missing)-1])
	}
	got := map[string][]byte{}
	applied, err := kvfsm.All(db, func(k, v []byte) error {
		got[string(k)] = bytes.Clone(v)
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	lost := 0
	for k, v := range acked {
		if g, ok := got[k]; !ok || !bytes.Equal(g, v) {
			if lost < 5 {
				t.Errorf("%s: acknowledged %s missing or different (present %v)", id, k, ok)
			}
			lost++
		}
	}
	t.Logf("%s: log %d..%d, applied %d, %d keys, %d acknowledged writes missing", id, first, last, applied, len(got), lost)
	if _, err := db.Get("nothing", []byte("x")); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("%s: %v", id, err)
	}
	return lost
}

func printRejoins(t *testing.T, rs []rejoin) {
	by := map[string][]time.Duration{}
	for _, r := range rs {
		by[r.kind] = append(by[r.kind], r.catchup)
	}
	for kind, ds := range by {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		t.Logf("rejoin after a %s kill: n=%d min %v median %v max %v", kind, len(ds),
			ds[0].Round(time.Millisecond), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
}
