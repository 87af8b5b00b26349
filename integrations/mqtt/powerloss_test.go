package kdbmqtt_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	kdbmqtt "github.com/kdb-project/kdb/integrations/mqtt"
	"github.com/kdb-project/kdb/integrations/mqtt/internal/brokerconf"
	"github.com/kdb-project/kdb/vfs"
	mqtt "github.com/mochi-mqtt/server/v2"
)

// inproc is a broker with the kdb hook in this process.
type inproc struct {
	db   *kdb.DB
	srv  *mqtt.Server
	hook *kdbmqtt.Hook
	addr string
}

func startInProc(t testing.TB, fs vfs.FS, dir string) *inproc {
	t.Helper()
	db, err := kdb.Open(dir, &kdb.Options{FS: fs, SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	srv, err := brokerconf.NewServer(log)
	if err != nil {
		t.Fatal(err)
	}
	return serveInProc(t, db, srv)
}

// serveInProc adds the kdb hook on db to srv and serves it on a loopback
// port; the test's cleanup closes both.
func serveInProc(t testing.TB, db *kdb.DB, srv *mqtt.Server) *inproc {
	t.Helper()
	h := new(kdbmqtt.Hook)
	if err := srv.AddHook(h, &kdbmqtt.Options{DB: db, Server: srv}); err != nil {
		t.Fatal(err)
	}
	l, err := brokerconf.Listen(srv, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	b := &inproc{db: db, srv: srv, hook: h, addr: l.Address()}
	t.Cleanup(func() { b.close(t) })
	return b
}

func (b *inproc) close(t testing.TB) {
	if b.srv == nil {
		return
	}
	_ = b.srv.Close()
	b.srv = nil
	if err := b.db.Close(); err != nil {
		t.Errorf("close store: %v", err)
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// snapshot is a power-loss image of the store taken right after some
// acknowledgements, with what had been acknowledged before it was taken.
type snapshot struct {
	fs       *vfs.MemFS
	acked    map[string]byte
	retained map[string]string
}

// TestPowerLoss_AckIsDurable takes power-loss images of the store (every
// write not fsynced is dropped) at moments right after the broker
// acknowledged messages, and opens each in a new broker: every message
// acknowledged before the image was taken (QoS 1, QoS 2, retained) is
// delivered to the offline persistent session, each QoS 2 message once, and
// every retained message acknowledged is there. The images are taken while
// fan-outs are still committing, so some hold acknowledged messages whose
// fan-out is not durable: the restarted broker publishes those again.
func TestPowerLoss_AckIsDurable(t *testing.T) {
	fs := vfs.NewCrashableMem()
	// fsyncs take 2 ms, as a disk's do: acknowledgements that do not wait
	// for them, and fan-outs still syncing, show in the images.
	slow := slowSyncs(fs)
	b := startInProc(t, slow, "store")
	off := mustDial(t, b.addr, connOpts{id: "offline", cleanStart: true, expiry: 3600})
	off.subscribe(t, 2, "q/#")
	off.close()

	nSnaps, perPub := 8, 120
	if testing.Short() {
		nSnaps, perPub = 4, 60
	}
	log := newAckLog()
	var (
		snapMu sync.Mutex
		snaps  []snapshot
		acks   int
	)
	takeSnap := func() {
		log.mu.Lock()
		s := snapshot{acked: map[string]byte{}, retained: map[string]string{}}
		for k, v := range log.acked {
			s.acked[k] = v
		}
		for k, v := range log.retained {
			s.retained[k] = v
		}
		log.mu.Unlock()
		s.fs = fs.CrashClone(vfs.CrashOptions{})
		snaps = append(snaps, s)
	}
	every := 4 * perPub / nSnaps
	var wg sync.WaitGroup
	for i, spec := range []struct {
		qos    byte
		retain bool
	}{{1, false}, {2, false}, {1, false}, {1, true}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dial(context.Background(), b.addr, connOpts{id: fmt.Sprintf("pub-%d", i), cleanStart: true})
			if err != nil {
				t.Error(err)
				return
			}
			defer c.close()
			for n := range perPub {
				topic := fmt.Sprintf("q/%d/%d", i, n)
				if spec.retain {
					topic = fmt.Sprintf("r/%d", n)
				}
				payload := fmt.Sprintf("p-%d-%d", i, n)
				log.mu.Lock()
				if !spec.retain {
					log.sent[payload] = spec.qos
				}
				log.mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := c.publish(ctx, topic, spec.qos, spec.retain, []byte(payload))
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				log.mu.Lock()
				if spec.retain {
					log.retained[topic] = payload
				} else {
					log.acked[payload] = spec.qos
				}
				log.mu.Unlock()
				snapMu.Lock()
				acks++
				if acks%every == 0 {
					takeSnap() // right after this ack, while others are in flight
				}
				snapMu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.close(t)
	if t.Failed() {
		return
	}

	pendingSeen := 0
	for i, s := range snaps {
		t.Run(fmt.Sprintf("image%d", i), func(t *testing.T) {
			pendingSeen += countPending(t, s.fs)
			rb := startInProc(t, s.fs, "store")
			c := mustDial(t, rb.addr, connOpts{id: "offline", expiry: 3600})
			if !c.connack.SessionPresent {
				t.Fatal("persistent session lost")
			}
			got := countPayloads(c.waitQuiet(len(s.acked), 500*time.Millisecond, 30*time.Second))
			checkDelivered(t, "offline session", &ackLog{acked: s.acked, sent: log.sent}, got, true)
			r := mustDial(t, rb.addr, connOpts{id: "reader", cleanStart: true})
			r.subscribe(t, 1, "r/#")
			have := map[string]string{}
			for _, m := range r.waitQuiet(len(s.retained), 300*time.Millisecond, 30*time.Second) {
				have[m.Topic] = string(m.Payload)
			}
			for topic, payload := range s.retained {
				if have[topic] != payload {
					t.Errorf("retained %s: acknowledged %q, after the power loss %q", topic, payload, have[topic])
				}
			}
		})
	}
	t.Logf("%d images; acknowledged messages whose fan-out was not durable yet (published again at restart): %d", len(snaps), pendingSeen)
	if len(snaps) == 0 {
		t.Fatal("no image taken")
	}
	if pendingSeen == 0 {
		t.Error("no image held a pending publish: the restart's publishing again was not exercised")
	}
}

// countPending returns the pending publishes stored in an image.
func countPending(t testing.TB, fs vfs.FS) int {
	db, err := kdb.Open("store", &kdb.Options{FS: fs.(*vfs.MemFS).Clone(), SegmentSize: 1 << 20, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ns, err := db.Namespace(kdbmqtt.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	err = ns.View(func(s *kdb.Snapshot) error {
		var err error
		n, err = s.Len("pub")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// slowSyncs makes every fsync of fs take 2 ms, as a disk's do.
func slowSyncs(fs vfs.FS) vfs.FS { return syncsTaking(fs, 2*time.Millisecond) }

// syncsTaking makes every fsync of fs take d.
func syncsTaking(fs vfs.FS, d time.Duration) vfs.FS {
	return vfs.Intercept(fs, func(e vfs.Event) error {
		if e.Op == vfs.OpSync {
			time.Sleep(d)
		}
		return nil
	})
}
