package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildBinary builds kdb-raft-kv into a temporary directory once per test
// binary run.
var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func buildBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kdb-raft-kv-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "kdb-raft-kv")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// cluster is three (or more) kdb-raft-kv processes on 127.0.0.1.
type cluster struct {
	t     testing.TB
	bin   string
	dir   string
	peers []peer
	args  []string

	mu     sync.Mutex
	procs  []*exec.Cmd
	exited []chan struct{}
	// unexpected is set when a node exits without being told to.
	unexpected []string
}

func newCluster(t testing.TB, nodes int, args ...string) *cluster {
	c := &cluster{t: t, bin: buildBinary(t), dir: t.TempDir(), args: args}
	ports := freePorts(t, 2*nodes)
	for i := range nodes {
		c.peers = append(c.peers, peer{fmt.Sprintf("n%d", i+1),
			fmt.Sprintf("127.0.0.1:%d", ports[2*i]), fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])})
	}
	c.procs = make([]*exec.Cmd, nodes)
	c.exited = make([]chan struct{}, nodes)
	for i := range nodes {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.procs {
			c.kill(i)
		}
	})
	return c
}

func (c *cluster) nodeDir(i int) string { return filepath.Join(c.dir, c.peers[i].id) }

func (c *cluster) peersFlag() string {
	var s []string
	for _, p := range c.peers {
		s = append(s, p.id+"="+p.raft+"="+p.http)
	}
	return strings.Join(s, ",")
}

// start execs node i (its previous process must have exited).
func (c *cluster) start(i int) {
	c.t.Helper()
	lf, err := os.OpenFile(filepath.Join(c.dir, c.peers[i].id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	args := append([]string{"-id", c.peers[i].id, "-dir", c.nodeDir(i), "-peers", c.peersFlag()}, c.args...)
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// A node dies with the test process, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan struct{})
	c.mu.Lock()
	c.procs[i], c.exited[i] = cmd, done
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		lf.Close()
		c.mu.Lock()
		if c.procs[i] == cmd {
			c.procs[i] = nil
			c.unexpected = append(c.unexpected, fmt.Sprintf("%s exited by itself: %v", c.peers[i].id, err))
		}
		c.mu.Unlock()
		close(done)
	}()
}

func (c *cluster) signal(i int, sig syscall.Signal) {
	c.mu.Lock()
	cmd, done := c.procs[i], c.exited[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		c.t.Errorf("%s did not stop within 20 s of %v", c.peers[i].id, sig)
	}
}

func (c *cluster) kill(i int) { c.signal(i, syscall.SIGKILL) }
func (c *cluster) stop(i int) { c.signal(i, syscall.SIGTERM) }

func (c *cluster) failures() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.unexpected...)
}

func (c *cluster) logTail(i int) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, c.peers[i].id+".log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

var httpc = &http.Client{Timeout: 3 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}

func (c *cluster) status(i int) (Status, error) {
	var s Status
	resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + c.peers[i].http + "/status")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&s)
	return s, err
}

// leader waits for a node that says it leads and returns its number.
func (c *cluster) leader(timeout time.Duration) int {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for i := range c.peers {
			if s, err := c.status(i); err == nil && s.State == "Leader" {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("no leader within %v; failures %v", timeout, c.failures())
	return -1
}

// put sends one write to node i and reports whether it was acknowledged.
func (c *cluster) put(i int, key string, value []byte) bool {
	req, _ := http.NewRequest(http.MethodPut, "http://"+c.peers[i].http+"/kv/"+key, bytes.NewReader(value))
	resp, err := httpc.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// caughtUp waits until node i has applied at least index.
func (c *cluster) caughtUp(i int, index uint64, timeout time.Duration) (Status, bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if s, err := c.status(i); err == nil && s.Applied >= index {
			return s, true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return Status{}, false
}

// writers run n clients putting unique keys until stop is closed; every
// acknowledged key and value lands in acked.
type writers struct {
	mu    sync.Mutex
	acked map[string][]byte
	sent  int
	wg    sync.WaitGroup
	stop  chan struct{}
}

func (c *cluster) startWriters(n int, valueSize func(seq int) int) *writers {
	w := &writers{acked: map[string][]byte{}, stop: make(chan struct{})}
	for g := range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			target := g % len(c.peers)
			for seq := 0; ; seq++ {
				select {
				case <-w.stop:
					return
				default:
				}
				key := fmt.Sprintf("w%02d-%07d", g, seq)
				size := 16
				if valueSize != nil {
					size = valueSize(seq)
				}
				val := []byte(strings.Repeat(fmt.Sprintf("%s;", key), size/12+1)[:size])
				ok := c.put(target, key, val)
				w.mu.Lock()
				w.sent++
				if ok {
					w.acked[key] = val
				}
				w.mu.Unlock()
				if !ok {
					target = (target + 1) % len(c.peers)
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	return w
}

func (w *writers) halt() {
	close(w.stop)
	w.wg.Wait()
}

func (w *writers) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}
