package broker

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// fillQueue sends n small messages to queue q, many to a transaction, and
// returns their sequence numbers.
func fillQueue(t *testing.T, b *Broker, q string, n int) []uint64 {
	t.Helper()
	const per = 2000
	for i := 0; i < n; i += per {
		tx := b.BeginTx()
		for j := i; j < min(i+per, n); j++ {
			if err := tx.Send(Queue, q, &Message{ID: fmt.Sprint("m-", j), Body: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	d, err := b.Destination(Queue, q)
	if err != nil || d.Count != uint64(n) {
		t.Fatalf("queue %q after sending %d: %+v, %v", q, n, d, err)
	}
	seqs := make([]uint64, n)
	for i := range seqs {
		seqs[i] = d.NextSeq - uint64(n) + uint64(i)
	}
	return seqs
}

// TestAckAsync_LongListIsLinear: AckAsync's check that a list names no
// message twice compared each sequence number with every one before it,
// so a list of 100,000 took seconds under the store's lock (quadratic in
// the caller's input). Long lists are now checked with a set: ten times
// the list costs about ten times the time, not a hundred. A list naming a
// message twice is still kdb.ErrNotFound, and acks nothing.
func TestAckAsync_LongListIsLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 110,000 messages")
	}
	if raceEnabled {
		t.Skip("timings under the race detector say nothing")
	}
	b := openTestBroker(t, &kdb.Options{Sync: kdb.UnsafeSyncNever})
	const small, large = 10_000, 100_000
	ackTime := func(q string, n int) time.Duration {
		seqs := fillQueue(t, b, q, n)
		// The same list with its first message again at the end: refused.
		dup := append(append([]uint64(nil), seqs...), seqs[0])
		if err := b.AckAsync(Queue, q, dup...); !isNotFound(err) {
			t.Fatalf("AckAsync of %d messages naming one twice: %v, want kdb.ErrNotFound", n, err)
		}
		start := time.Now()
		if err := b.AckAsync(Queue, q, seqs...); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if err := b.Sync(); err != nil {
			t.Fatal(err)
		}
		if d, err := b.Destination(Queue, q); err != nil || d.Count != 0 {
			t.Fatalf("queue %q after AckAsync of all %d: %+v, %v", q, n, d, err)
		}
		return took
	}
	ts := ackTime("small", small)
	tl := ackTime("large", large)
	t.Logf("AckAsync of %d messages: %v; of %d: %v (%.1fx)", small, ts, large, tl, float64(tl)/float64(ts))
	if tl > 40*ts && tl > 500*time.Millisecond {
		t.Fatalf("AckAsync of %d messages took %v, of %d %v: %.0fx for %dx the list (quadratic)",
			small, ts, large, tl, float64(tl)/float64(ts), large/small)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestAckAsync_LongListNamingOneTwice: a list longer than maxAckScan is
// checked with a set; one naming a message twice is kdb.ErrNotFound, as a
// short one is, and acks nothing.
func TestAckAsync_LongListNamingOneTwice(t *testing.T) {
	b := openTestBroker(t, nil)
	seqs := fillQueue(t, b, "q", maxAckScan+4)
	for _, at := range []int{1, maxAckScan, maxAckScan + 3} {
		dup := append(append([]uint64(nil), seqs...), seqs[at])
		if err := b.AckAsync(Queue, "q", dup...); !isNotFound(err) {
			t.Fatalf("AckAsync of %d messages naming message %d twice: %v, want kdb.ErrNotFound", len(dup), seqs[at], err)
		}
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Destination(Queue, "q"); err != nil || d.Count != uint64(len(seqs)) {
		t.Fatalf("after the refused AckAsyncs: %+v, %v; want all %d messages", d, err, len(seqs))
	}
}

// TestAckAsync_LongListOfUnknownsAllocatesLittle: AckAsync sized its set
// of the sequence numbers seen by the caller's whole list before checking
// the first: a list of 4 million naming a message not in the queue
// allocated 144 MiB (the list is 30 MiB) to return kdb.ErrNotFound at
// its second entry; Ack allocates nothing for it. The set now grows with
// the entries checked.
func TestAckAsync_LongListOfUnknownsAllocatesLittle(t *testing.T) {
	b := openTestBroker(t, nil)
	seqs := fillQueue(t, b, "q", 2)
	long := make([]uint64, 4_000_000)
	for i := range long {
		long[i] = 1 << 40
	}
	long[0] = seqs[0]
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := b.AckAsync(Queue, "q", long...)
	runtime.ReadMemStats(&after)
	if !isNotFound(err) {
		t.Fatalf("AckAsync of a list whose second entry is not in the queue: %v, want kdb.ErrNotFound", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Fatalf("AckAsync of %d sequence numbers, refused at the second: allocated %d MiB (the list is %d MiB)",
			len(long), got>>20, len(long)*8>>20)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Destination(Queue, "q"); err != nil || d.Count != 2 {
		t.Fatalf("after the refused AckAsync: %+v, %v; want both messages", d, err)
	}
}
