package broker_test

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
)

// TestBroker_CloseUnderLoad: Close of the DB while 16 goroutines Send,
// AckAsync and Read returns within CloseWait, panics nothing, every call
// after it is kdb.ErrClosed, and after a reopen every Send that returned
// nil is there unless an AckAsync of it returned nil (an ack may be lost,
// never a message). A guard: it held when written.
func TestBroker_CloseUnderLoad(t *testing.T) {
	for round := 0; round < 4; round++ {
		fs := vfs.NewMem()
		o := brokerOpts(fs)
		o.CloseWait = 2 * time.Second
		db, err := kdb.Open("/db", o)
		if err != nil {
			t.Fatal(err)
		}
		b := openOn(t, db)
		if err := b.CreateDestination(broker.Queue, "q"); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		sent := map[string]uint64{}
		acked := map[uint64]bool{}
		var wg sync.WaitGroup
		var stop atomic.Bool
		var panics atomic.Int32
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				defer func() {
					if r := recover(); r != nil {
						panics.Add(1)
						t.Errorf("panic: %v", r)
					}
				}()
				for i := 0; !stop.Load(); i++ {
					id := fmt.Sprintf("g%d-%d", g, i)
					switch g % 3 {
					case 0, 1:
						seq, err := b.Send(broker.Queue, "q", &broker.Message{ID: id, Body: []byte(id)})
						if err == nil {
							mu.Lock()
							sent[id] = seq
							mu.Unlock()
						} else if !errors.Is(err, kdb.ErrClosed) {
							t.Errorf("send: %v", err)
							return
						}
						if g%3 == 1 && err == nil {
							if err := b.AckAsync(broker.Queue, "q", seq); err == nil {
								mu.Lock()
								acked[seq] = true
								mu.Unlock()
							} else if !errors.Is(err, kdb.ErrClosed) && !errors.Is(err, kdb.ErrNotFound) {
								t.Errorf("ackasync: %v", err)
								return
							}
						}
						if err != nil {
							return
						}
					case 2:
						_, err := b.Read(broker.Queue, "q", 0, 50)
						if errors.Is(err, kdb.ErrClosed) {
							return
						} else if err != nil {
							t.Errorf("read: %v", err)
							return
						}
					}
				}
			}(g)
		}
		time.Sleep(time.Duration(20+round*30) * time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- db.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("close: %v", err)
			}
		case <-time.After(o.CloseWait + 5*time.Second):
			t.Fatalf("Close hung")
		}
		stop.Store(true)
		wch := make(chan struct{})
		go func() { wg.Wait(); close(wch) }()
		select {
		case <-wch:
		case <-time.After(10 * time.Second):
			t.Fatalf("workers hung after Close")
		}
		db2, err := kdb.Open("/db", brokerOpts(fs))
		if err != nil {
			t.Fatal(err)
		}
		b2 := openOn(t, db2)
		ms, err := b2.Read(broker.Queue, "q", 0, math.MaxInt)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, m := range ms {
			have[m.ID] = true
		}
		lost := 0
		for id, seq := range sent {
			if !have[id] && !acked[seq] {
				lost++
				if lost < 5 {
					t.Errorf("round %d: sent %s (seq %d) lost", round, id, seq)
				}
			}
		}
		t.Logf("round %d: sent %d, acked %d, have %d, lost %d", round, len(sent), len(acked), len(ms), lost)
		if err := checkStore(b2); err != nil {
			t.Error(err)
		}
		db2.Close()
	}
}

// TestBroker_SyncRacingClose: Sync and AckAsync racing Close return (nil
// or kdb.ErrClosed) and never wait for a deferred ack Close abandoned; a
// Sync after Close is kdb.ErrClosed. A guard: it held when written.
func TestBroker_SyncRacingClose(t *testing.T) {
	for round := 0; round < 20; round++ {
		fs := vfs.NewMem()
		db, err := kdb.Open("/db", brokerOpts(fs))
		if err != nil {
			t.Fatal(err)
		}
		b := openOn(t, db)
		var seqs []uint64
		for i := 0; i < 50; i++ {
			seqs = append(seqs, mustSend(t, b, broker.Queue, "q", &broker.Message{ID: fmt.Sprint(i)}))
		}
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := g; i < len(seqs); i += 4 {
					if err := b.AckAsync(broker.Queue, "q", seqs[i]); err != nil && !errors.Is(err, kdb.ErrClosed) {
						t.Errorf("ackasync: %v", err)
					}
					if err := b.Sync(); err != nil && !errors.Is(err, kdb.ErrClosed) {
						t.Errorf("sync: %v", err)
					}
				}
			}(g)
		}
		time.Sleep(time.Duration(round) * 100 * time.Microsecond)
		if err := within(t, 15*time.Second, "Close", db.Close); err != nil {
			t.Error(err)
		}
		if err := within(t, 15*time.Second, "workers", func() error { wg.Wait(); return nil }); err != nil {
			t.Error(err)
		}
		if err := within(t, 5*time.Second, "Sync after close", b.Sync); !errors.Is(err, kdb.ErrClosed) {
			t.Errorf("sync after close: %v", err)
		}
	}
}
