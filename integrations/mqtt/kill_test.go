package kdbmqtt_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// ackLog records what the broker acknowledged.
type ackLog struct {
	mu       sync.Mutex
	acked    map[string]byte   // payload → QoS, for messages to q1/# and q2/#
	sent     map[string]byte   // every payload sent (acked or not)
	retained map[string]string // topic → payload, retained messages acked
}

func newAckLog() *ackLog {
	return &ackLog{acked: map[string]byte{}, sent: map[string]byte{}, retained: map[string]string{}}
}

// TestKill_AckedSurvives runs kdb-mqtt as a child process and SIGKILLs it
// at random moments while paho clients publish QoS 1 and QoS 2 messages (to
// an offline persistent session and an online one) and retained messages.
// After the last restart: every retained message acknowledged is there;
// the offline session is present with its subscriptions (it receives a
// new message without subscribing again); every QoS 1 and QoS 2 message
// acknowledged (PUBACK, PUBCOMP) is delivered to both sessions, and each
// QoS 2 message at most once to the offline one. 20 kills; 5 with -short.
func TestKill_AckedSurvives(t *testing.T) {
	kills := 20
	if testing.Short() {
		kills = 5
	}
	bin := buildBin(t, "./cmd/kdb-mqtt")
	dir := t.TempDir()
	p := startBroker(t, bin, "-store", dir)

	off := mustDial(t, p.addr, connOpts{id: "sub-offline", cleanStart: true, expiry: 3600})
	off.subscribe(t, 2, "q1/#", "q2/#")
	off.close()

	log := newAckLog()
	onlineGot := map[string]int{}
	var onMu sync.Mutex
	collectOnline := func(c *client) {
		onMu.Lock()
		defer onMu.Unlock()
		for _, m := range c.messages() {
			onlineGot[string(m.Payload)]++
		}
	}
	on := mustDial(t, p.addr, connOpts{id: "sub-online", cleanStart: true, expiry: 3600})
	on.subscribe(t, 1, "q1/#", "q2/#")

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	totalRun := time.Duration(0)
	for k := 0; k < kills; k++ {
		if p == nil {
			p = startBroker(t, bin, "-store", dir)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			c, err := dial(ctx, p.addr, connOpts{id: "sub-online", expiry: 3600})
			cancel()
			if err != nil {
				t.Fatalf("cycle %d: online subscriber: %v", k, err)
			}
			on = c
		}
		run := time.Duration(rng.IntN(400)) * time.Millisecond
		totalRun += run
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i, spec := range []struct {
			qos    byte
			retain bool
		}{{1, false}, {1, false}, {2, false}, {1, true}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				publishLoop(ctx, p.addr, fmt.Sprintf("pub-%d-%d", k, i), k, i, spec.qos, spec.retain, log)
			}()
		}
		time.Sleep(run)
		p.kill()
		cancel()
		wg.Wait()
		collectOnline(on)
		on.close()
		p = nil
	}

	p = startBroker(t, bin, "-store", dir)
	log.mu.Lock()
	nAcked := len(log.acked)
	log.mu.Unlock()
	t.Logf("kills=%d publishing=%v acked=%d retained=%d", kills, totalRun, nAcked, len(log.retained))
	if nAcked == 0 {
		t.Fatal("no message was acknowledged: the test exercised nothing")
	}

	// The offline session: present, and everything acknowledged delivered.
	off = mustDial(t, p.addr, connOpts{id: "sub-offline", expiry: 3600})
	if !off.connack.SessionPresent {
		t.Fatal("the offline persistent session is gone after the restarts (CONNACK session present = false)")
	}
	got := countPayloads(off.waitQuiet(nAcked, 1500*time.Millisecond, 90*time.Second))
	checkDelivered(t, "offline session", log, got, true)

	// Its subscriptions were kept: a new message reaches it.
	pub := mustDial(t, p.addr, connOpts{id: "pub-final", cleanStart: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pub.publish(ctx, "q1/final", 1, false, []byte("final")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for countPayloads(off.messages())["final"] == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the offline session's subscription to q1/# did not survive: a new message did not reach it")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The online session, reconnected after each restart.
	on = mustDial(t, p.addr, connOpts{id: "sub-online", expiry: 3600})
	on.waitQuiet(0, 1500*time.Millisecond, 60*time.Second)
	collectOnline(on)
	onMu.Lock()
	checkDelivered(t, "online session", log, onlineGot, false)
	onMu.Unlock()

	// Retained messages.
	r := mustDial(t, p.addr, connOpts{id: "retained-reader", cleanStart: true})
	r.subscribe(t, 1, "r/#")
	rm := r.waitQuiet(len(log.retained), 1000*time.Millisecond, 60*time.Second)
	have := map[string]string{}
	for _, m := range rm {
		have[m.Topic] = string(m.Payload)
	}
	var missing []string
	for topic, payload := range log.retained {
		if have[topic] != payload {
			missing = append(missing, fmt.Sprintf("%s=%q (have %q)", topic, payload, have[topic]))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("%d of %d acknowledged retained messages missing after %d kills: %v", len(missing), len(log.retained), kills, head(missing, 10))
	}
}

func head(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}

func countPayloads(ms []*pahoPublish) map[string]int {
	got := map[string]int{}
	for _, m := range ms {
		got[string(m.Payload)]++
	}
	return got
}

// checkDelivered checks that every acknowledged message was delivered,
// that nothing unknown was, and (once) that no QoS 2 message was delivered
// twice.
func checkDelivered(t *testing.T, who string, log *ackLog, got map[string]int, once bool) {
	t.Helper()
	log.mu.Lock()
	defer log.mu.Unlock()
	var lost, dup, unknown []string
	dups1 := 0
	for payload, qos := range log.acked {
		if got[payload] == 0 {
			lost = append(lost, payload)
		}
		_ = qos
	}
	for payload, n := range got {
		qos, ok := log.sent[payload]
		if !ok {
			if payload != "final" {
				unknown = append(unknown, payload)
			}
			continue
		}
		if n > 1 && qos == 2 && once {
			dup = append(dup, fmt.Sprintf("%s×%d", payload, n))
		}
		if n > 1 && qos == 1 {
			dups1 += n - 1
		}
	}
	sort.Strings(lost)
	sort.Strings(dup)
	t.Logf("%s: %d acknowledged, %d delivered, %d lost, %d QoS 1 duplicates", who, len(log.acked), len(got), len(lost), dups1)
	if len(unknown) > 0 {
		t.Errorf("%s received %d messages nobody sent: %v", who, len(unknown), head(unknown, 5))
	}
	if len(lost) > 0 {
		t.Errorf("%s: %d acknowledged messages lost: %v", who, len(lost), head(lost, 10))
	}
	if len(dup) > 0 {
		t.Errorf("%s: %d QoS 2 messages delivered more than once: %v", who, len(dup), head(dup, 10))
	}
}

// publishLoop publishes until ctx ends or the connection fails, recording
// what was sent and what was acknowledged.
func publishLoop(ctx context.Context, addr, id string, cycle, pubIdx int, qos byte, retain bool, log *ackLog) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	c, err := dial(dctx, addr, connOpts{id: id, cleanStart: true})
	cancel()
	if err != nil {
		return
	}
	defer c.close()
	for n := 0; ctx.Err() == nil; n++ {
		var topic, payload string
		if retain {
			topic = fmt.Sprintf("r/%d/%d", cycle, n)
			payload = "r-" + topic
		} else {
			topic = fmt.Sprintf("q%d/%d/%d/%d", qos, cycle, pubIdx, n)
			payload = strings.ReplaceAll(topic, "/", "-")
		}
		log.mu.Lock()
		if !retain {
			log.sent[payload] = qos
		}
		log.mu.Unlock()
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.publish(pctx, topic, qos, retain, []byte(payload))
		pcancel()
		if err != nil {
			return
		}
		log.mu.Lock()
		if retain {
			log.retained[topic] = payload
		} else {
			log.acked[payload] = qos
		}
		log.mu.Unlock()
	}
}
