package kdbmqtt_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

var (
	binDir  string
	binOnce = map[string]*sync.Once{}
	binMu   sync.Mutex
	binErr  = map[string]error{}
)

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "kdbmqtt-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// buildBin builds a command of this module once per test process.
func buildBin(t testing.TB, pkg string) string {
	t.Helper()
	binMu.Lock()
	once := binOnce[pkg]
	if once == nil {
		once = new(sync.Once)
		binOnce[pkg] = once
	}
	binMu.Unlock()
	out := filepath.Join(binDir, filepath.Base(pkg))
	once.Do(func() {
		args := []string{"build", "-o", out}
		if raceBuild {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, pkg)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			binMu.Lock()
			binErr[pkg] = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
			binMu.Unlock()
		}
	})
	binMu.Lock()
	err := binErr[pkg]
	binMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// logBuf collects a child's stderr, safe for concurrent use.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proc is a broker running as a child process.
type proc struct {
	cmd  *exec.Cmd
	addr string
	log  *logBuf
	done chan struct{}
	err  error
}

var listenRE = regexp.MustCompile(`msg="(?:kdb-mqtt|peerbroker): listening" address=(\S+)`)

// startBroker runs bin with args (plus -listen 127.0.0.1:0 unless listen
// is given) and waits until it serves.
func startBroker(t testing.TB, bin string, args ...string) *proc {
	t.Helper()
	p, err := tryStart(bin, 30*time.Second, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.kill()
		if l := p.log.String(); strings.Contains(l, "WARNING: DATA RACE") {
			t.Errorf("the race detector reported a data race in %s:\n%s", filepath.Base(bin), l)
		}
	})
	return p
}

func tryStart(bin string, timeout time.Duration, args ...string) (*proc, error) {
	hasListen := false
	for _, a := range args {
		if a == "-listen" {
			hasListen = true
		}
	}
	if !hasListen {
		args = append(args, "-listen", "127.0.0.1:0")
	}
	p := &proc{log: &logBuf{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	if v := os.Getenv("KDB_MQTT_BROKER_GOMAXPROCS"); v != "" {
		// The broker processes only (every hook alike), not the test's
		// clients.
		p.cmd.Env = append(os.Environ(), "GOMAXPROCS="+v)
	}
	pr, pw := io.Pipe()
	p.cmd.Stderr = pw
	p.cmd.Stdout = p.log
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	addrCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.log.Write([]byte(line + "\n"))
			if m := listenRE.FindStringSubmatch(line); m != nil {
				select {
				case addrCh <- m[1]:
				default:
				}
			}
		}
	}()
	go func() {
		p.err = p.cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	select {
	case a := <-addrCh:
		p.addr = a
		return p, nil
	case <-p.done:
		return p, fmt.Errorf("%s exited before serving: %v\n%s", filepath.Base(bin), p.err, p.log.String())
	case <-time.After(timeout):
		p.kill()
		return nil, fmt.Errorf("%s did not serve within %v\n%s", filepath.Base(bin), timeout, p.log.String())
	}
}

// kill SIGKILLs the broker and waits for it to exit.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop SIGTERMs the broker and waits for a clean exit.
func (p *proc) stop(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.kill()
		t.Fatalf("broker did not stop on SIGTERM\n%s", p.log.String())
	}
	if p.err != nil {
		t.Fatalf("broker exited with %v after SIGTERM\n%s", p.err, p.log.String())
	}
}

// client is a paho.golang MQTT v5 client on one connection.
type client struct {
	c       *paho.Client
	connack *paho.Connack
	mu      sync.Mutex
	got     []*paho.Publish
	onRecv  func(*paho.Publish) // if set, called for each PUBLISH before its ack
	notify  chan struct{}
}

// setOnRecv sets a function called for each PUBLISH received, before the
// client acknowledges it.
func (c *client) setOnRecv(fn func(*paho.Publish)) {
	c.mu.Lock()
	c.onRecv = fn
	c.mu.Unlock()
}

type connOpts struct {
	id         string
	cleanStart bool
	expiry     uint32 // session expiry interval (s)
}

func dial(ctx context.Context, addr string, o connOpts) (*client, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cl := &client{notify: make(chan struct{}, 1)}
	cl.c = paho.NewClient(paho.ClientConfig{
		Conn:          conn,
		PacketTimeout: 10 * time.Second,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(r paho.PublishReceived) (bool, error) {
			cl.mu.Lock()
			cl.got = append(cl.got, r.Packet)
			fn := cl.onRecv
			cl.mu.Unlock()
			if fn != nil {
				fn(r.Packet)
			}
			select {
			case cl.notify <- struct{}{}:
			default:
			}
			return true, nil
		}},
		OnClientError: func(error) {},
	})
	cp := &paho.Connect{ClientID: o.id, CleanStart: o.cleanStart, KeepAlive: 30}
	if o.expiry > 0 {
		e := o.expiry
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &e}
	}
	ca, err := cl.c.Connect(ctx, cp)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if ca.ReasonCode != 0 {
		conn.Close()
		return nil, fmt.Errorf("connack reason %#x", ca.ReasonCode)
	}
	cl.connack = ca
	return cl, nil
}

func mustDial(t testing.TB, addr string, o connOpts) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := dial(ctx, addr, o)
	if err != nil {
		t.Fatalf("connect %s as %q: %v", addr, o.id, err)
	}
	t.Cleanup(func() { c.close() })
	return c
}

func (c *client) close() { _ = c.c.Disconnect(&paho.Disconnect{ReasonCode: 0}) }

func (c *client) subscribe(t testing.TB, qos byte, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := &paho.Subscribe{}
	for _, tp := range topics {
		s.Subscriptions = append(s.Subscriptions, paho.SubscribeOptions{Topic: tp, QoS: qos})
	}
	sa, err := c.c.Subscribe(ctx, s)
	if err != nil {
		t.Fatalf("subscribe %v: %v", topics, err)
	}
	for i, r := range sa.Reasons {
		if r > 2 {
			t.Fatalf("subscribe %s refused: %#x", topics[i], r)
		}
	}
}

// publish sends one message and reports whether the broker acknowledged
// it (PUBACK for QoS 1, PUBCOMP for QoS 2, with a success reason code).
func (c *client) publish(ctx context.Context, topic string, qos byte, retain bool, payload []byte) error {
	r, err := c.c.Publish(ctx, &paho.Publish{Topic: topic, QoS: qos, Retain: retain, Payload: payload})
	if err != nil {
		return err
	}
	if r != nil && r.ReasonCode >= 0x80 {
		return fmt.Errorf("publish %s: reason %#x", topic, r.ReasonCode)
	}
	return nil
}

// messages returns what the client received so far.
func (c *client) messages() []*paho.Publish {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*paho.Publish(nil), c.got...)
}

// waitQuiet waits until the client received at least min messages and
// then nothing for quiet, or until timeout.
func (c *client) waitQuiet(min int, quiet, timeout time.Duration) []*paho.Publish {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		n := len(c.messages())
		select {
		case <-c.notify:
			continue
		case <-time.After(quiet):
			if n >= min && len(c.messages()) == n {
				return c.messages()
			}
		}
	}
	return c.messages()
}

var errNotAcked = errors.New("not acknowledged")

type pahoPublish = paho.Publish
