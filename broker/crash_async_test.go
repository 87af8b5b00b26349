package broker_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/internal/kdbtest/dbtest"
	"github.com/kdb-project/kdb/vfs"
)

// asyncModel is what the async-ack workload has been told so far.
type asyncModel struct {
	mu sync.Mutex
	// started: message IDs whose Send began (a crash image may hold them).
	started map[string]bool
	// ackStarted: messages whose Ack or AckAsync began (a crash image may
	// have lost them).
	ackStarted map[string]bool
	// sent: Send returned: durable.
	sent map[string]bool
	// acked: AckAsync or Ack returned (ordered: applied and durable or not).
	acked map[string]bool
	// durable: acks known durable: an Ack returned, or an AckAsync was
	// followed by a synced write (Send, Ack) or Checkpoint that returned.
	durable map[string]bool
	// pending: AckAsync returned, no synced write since.
	pending []string
}

func (m *asyncModel) syncedWrite() {
	for _, id := range m.pending {
		m.durable[id] = true
	}
	m.pending = m.pending[:0]
}

// snapshot copies the sets a crash image is checked against.
func (m *asyncModel) snapshot() (sent, acked, durable map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cp := func(s map[string]bool) map[string]bool {
		out := make(map[string]bool, len(s))
		for k, v := range s {
			out[k] = v
		}
		return out
	}
	return cp(m.sent), cp(m.acked), cp(m.durable)
}

type asyncCounts struct {
	points, redelivered, durableByLater atomic.Int64
}

// verifyAsyncImage opens a crash image and checks it against the model:
// every message whose Send returned and that was not acked is there; no message whose ack was durable is; nothing there was never
// sent; and each message there can be acked exactly once (the counts
// agree: no ack was applied twice).
//
// deep: then it sends one more message and checks that it survives a
// second crash.
func verifyAsyncImage(img *vfs.MemFS, m *asyncModel, sent, acked, durable map[string]bool, deep bool, c *asyncCounts) string {
	c.points.Add(1)
	db, err := kdb.Open("/db", dbtest.CampaignOptions(img))
	if err != nil {
		return fmt.Sprintf("open: %v", err)
	}
	defer db.Close()
	b, err := broker.Open(db)
	if err != nil {
		return fmt.Sprintf("broker: %v", err)
	}
	var msgs []broker.Message
	for from := uint64(0); ; {
		ms, err := b.Read(broker.Queue, "q", from, 100)
		if err != nil && !errors.Is(err, kdb.ErrNotFound) {
			return fmt.Sprintf("read: %v", err)
		}
		if len(ms) == 0 {
			break
		}
		msgs = append(msgs, ms...)
		from = ms[len(ms)-1].Seq + 1
	}
	present := map[string]bool{}
	m.mu.Lock()
	for _, msg := range msgs {
		if !m.started[msg.ID] {
			m.mu.Unlock()
			return fmt.Sprintf("message %s is there but was never sent", msg.ID)
		}
		present[msg.ID] = true
	}
	for id := range sent {
		if !m.ackStarted[id] && !present[id] {
			m.mu.Unlock()
			return fmt.Sprintf("message %s was sent (acknowledged) and never acked, but it is gone", id)
		}
	}
	m.mu.Unlock()
	for id := range sent {
		if durable[id] && present[id] {
			return fmt.Sprintf("message %s is there but its ack was durable", id)
		}
		if acked[id] && !durable[id] && present[id] {
			c.redelivered.Add(1)
		}
		if durable[id] && !present[id] && acked[id] {
			c.durableByLater.Add(1)
		}
	}
	if d, err := b.Destination(broker.Queue, "q"); err == nil && d.Count != uint64(len(msgs)) {
		return fmt.Sprintf("destination count %d, %d messages there", d.Count, len(msgs))
	} else if err != nil && !errors.Is(err, kdb.ErrNotFound) {
		return fmt.Sprintf("destination: %v", err)
	}
	if err := checkStore(b); err != nil {
		return fmt.Sprintf("check: %v", err)
	}
	for _, msg := range msgs {
		if err := b.Ack(broker.Queue, "q", msg.Seq); err != nil {
			return fmt.Sprintf("ack %s (seq %d) after recovery: %v", msg.ID, msg.Seq, err)
		}
		if err := b.Ack(broker.Queue, "q", msg.Seq); !errors.Is(err, kdb.ErrNotFound) {
			return fmt.Sprintf("second ack of %s (seq %d) after recovery: %v, want ErrNotFound", msg.ID, msg.Seq, err)
		}
	}
	if len(msgs) > 0 {
		if d, err := b.Destination(broker.Queue, "q"); err != nil || d.Count != 0 {
			return fmt.Sprintf("after acking everything: %+v %v", d, err)
		}
	}
	if !deep {
		return ""
	}
	// The store goes on after recovery: a message sent now survives a
	// second crash (a checkpoint that covered journal records not yet
	// durable would make the next recovery skip it).
	if _, err := b.Send(broker.Queue, "q", &broker.Message{ID: "after"}); err != nil {
		return fmt.Sprintf("send after recovery: %v", err)
	}
	db2, err := kdb.Open("/db", dbtest.CampaignOptions(img.CrashClone(vfs.CrashOptions{})))
	if err != nil {
		return fmt.Sprintf("open after a second crash: %v", err)
	}
	defer db2.Close()
	b2, err := broker.Open(db2)
	if err != nil {
		return fmt.Sprintf("broker after a second crash: %v", err)
	}
	ms, err := b2.Read(broker.Queue, "q", 0, 10)
	if err != nil || len(ms) != 1 || ms[0].ID != "after" {
		return fmt.Sprintf("after a second crash: %d messages (want the one sent after recovery), %v", len(ms), err)
	}
	return ""
}

// TestBroker_AsyncAckCrash runs a broker workload mixing synced Sends,
// asynchronous acks (AckAsync), a few synced Acks, checkpoints and pauses
// longer than SyncInterval (so the timer syncs), and before every mutating
// file-system operation takes power-loss images and recovers each
// (verifyAsyncImage). It runs once with SyncInterval at an hour, so that
// acks stay pending across checkpoints and crash points, and once with the
// default (the timer syncs them). It requires that lost async acks (redelivery) and
// async acks made durable by a later synced write were both seen.
//
// KDB_CRASH_STEPS (default 80; 40 under -race or -short) sets the
// workload length; KDB_LONG=1 runs 600 steps and 3 seeds.
func TestBroker_AsyncAckCrash(t *testing.T) {
	steps, seeds := 80, 1
	if raceEnabled || testing.Short() {
		steps = 40
	}
	if os.Getenv("KDB_LONG") != "" {
		steps, seeds = 600, 3
	}
	if v, err := strconv.Atoi(os.Getenv("KDB_CRASH_STEPS")); err == nil {
		steps = v
	}
	var c asyncCounts
	for seed := 1; seed <= seeds; seed++ {
		// Without the timer (each crash point verifies for far longer
		// than 10 ms, so it would sync every pending ack first), then
		// with it.
		runAsyncCampaign(t, uint64(seed), steps, time.Hour, &c)
		runAsyncCampaign(t, uint64(seed), steps/3, 0, &c)
	}
	t.Logf("crash-points=%d redelivered-after-crash=%d async-acks-durable-by-a-later-write=%d",
		c.points.Load(), c.redelivered.Load(), c.durableByLater.Load())
	if c.points.Load() < int64(steps) {
		t.Fatalf("only %d crash points for %d steps", c.points.Load(), steps)
	}
	if c.redelivered.Load() == 0 || c.durableByLater.Load() == 0 {
		t.Fatal("the workload did not exercise both lost and later-durable async acks")
	}
}

func runAsyncCampaign(t *testing.T, seed uint64, n int, syncInterval time.Duration, c *asyncCounts) {
	m := &asyncModel{started: map[string]bool{}, ackStarted: map[string]bool{}, sent: map[string]bool{}, acked: map[string]bool{}, durable: map[string]bool{}}
	mem := vfs.NewMem()
	var (
		mutating atomic.Int64
		vmu      sync.Mutex // one verification at a time
		failures []string
	)
	hook := func(e vfs.Event) error {
		if !e.Op.Mutating() {
			return nil
		}
		k := mutating.Add(1)
		vmu.Lock()
		defer vmu.Unlock()
		if len(failures) > 5 {
			return nil
		}
		// The model before the image: whatever returned before this
		// point completed its syncs before it.
		sent, acked, durable := m.snapshot()
		for i, o := range dbtest.CampaignSettings {
			o.Seed = int64(seed)*1_000_003 + k*7 + int64(i)
			img := mem.CrashClone(o)
			if msg := verifyAsyncImage(img, m, sent, acked, durable, i == 0, c); msg != "" {
				failures = append(failures, fmt.Sprintf("seed %d, op %d (%s %s), setting %+v: %s", seed, k, e.Op, e.Path, o, msg))
			}
		}
		return nil
	}
	opts := dbtest.CampaignOptions(vfs.Intercept(mem, hook))
	opts.SyncInterval = syncInterval
	db, err := kdb.Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	b := openOn(t, db)
	rng := rand.New(rand.NewPCG(seed, 11))
	type live struct {
		id  string
		seq uint64
	}
	var unacked []live
	body := make([]byte, 700) // above ValueThreshold: the body stays in the journal
	for i := range n {
		switch r := rng.IntN(100); {
		case r < 50 || len(unacked) == 0:
			id := fmt.Sprint("m-", i)
			m.mu.Lock()
			m.started[id] = true
			m.mu.Unlock()
			seq, err := b.Send(broker.Queue, "q", &broker.Message{ID: id, Body: body})
			if err != nil {
				t.Fatalf("step %d: send: %v", i, err)
			}
			m.mu.Lock()
			m.sent[id] = true
			m.syncedWrite()
			m.mu.Unlock()
			unacked = append(unacked, live{id, seq})
		case r < 90:
			j := rng.IntN(len(unacked))
			l := unacked[j]
			unacked = append(unacked[:j], unacked[j+1:]...)
			m.mu.Lock()
			m.ackStarted[l.id] = true
			m.mu.Unlock()
			if err := b.AckAsync(broker.Queue, "q", l.seq); err != nil {
				t.Fatalf("step %d: ack async %s: %v", i, l.id, err)
			}
			m.mu.Lock()
			m.acked[l.id] = true
			m.pending = append(m.pending, l.id)
			m.mu.Unlock()
		case r < 94:
			j := rng.IntN(len(unacked))
			l := unacked[j]
			unacked = append(unacked[:j], unacked[j+1:]...)
			m.mu.Lock()
			m.ackStarted[l.id] = true
			m.mu.Unlock()
			if err := b.Ack(broker.Queue, "q", l.seq); err != nil {
				t.Fatalf("step %d: ack %s: %v", i, l.id, err)
			}
			m.mu.Lock()
			m.acked[l.id] = true
			m.durable[l.id] = true
			m.syncedWrite()
			m.mu.Unlock()
		case r < 97:
			if err := db.Checkpoint(); err != nil {
				t.Fatalf("step %d: checkpoint: %v", i, err)
			}
			m.mu.Lock()
			m.syncedWrite()
			m.mu.Unlock()
		default:
			// Longer than SyncInterval: the timer makes the pending acks
			// durable (the model cannot know when: they stay "maybe").
			time.Sleep(15 * time.Millisecond)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	vmu.Lock()
	defer vmu.Unlock()
	for _, f := range failures {
		t.Error(f)
	}
}
