// The load of benchmarks/many_producers_bench.py: N idempotent producers (franz-go clients, one
// connection set each), acks=all, each sending R records a second, paced open-loop.
//
// Producer i sends its k-th record at start + (i/N + k)/R seconds: the sends of all producers are
// spread evenly over each period. Latency is taken from that scheduled time to the acknowledgement
// (the record's promise), so a producer held up by a stalled broker still counts the time its
// records should have left (no coordinated omission). Records scheduled in the first -warmup
// seconds are sent but not measured; those scheduled in the next -measure seconds are. Then the
// producers stop and wait up to -drain for what is in flight.
//
// One JSON line on stdout: records scheduled in the window, and of those acknowledged (by the end of
// the drain), failed and unacknowledged; the rate achieved (records acknowledged while the window
// lasted, whenever scheduled, over its length: below the target when the broker falls behind);
// Produce requests a second in the window; latency percentiles in ms; this process's CPU seconds.
// Progress goes to stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// produceRequests counts the Produce requests written in the measured window (OnBrokerWrite, key 0):
// records over requests is how many records a request carried (1 while the broker keeps up).
type produceRequests struct {
	measuring atomic.Bool
	n         atomic.Int64
}

func (h *produceRequests) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil && h.measuring.Load() {
		h.n.Add(1)
	}
}

type producer struct {
	cl   *kgo.Client
	mu   sync.Mutex
	lats []int32 // microseconds, records of the measured window
	errs int64
}

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "broker address")
	topic := flag.String("topic", "many-producers", "topic to produce to")
	n := flag.Int("producers", 1000, "producers (clients)")
	rate := flag.Float64("rate", 50, "records a second per producer")
	size := flag.Int("value-bytes", 100, "value size")
	warmup := flag.Duration("warmup", 20*time.Second, "sent, not measured")
	measure := flag.Duration("measure", 60*time.Second, "measured window")
	drain := flag.Duration("drain", 30*time.Second, "longest wait for acknowledgements after the window")
	linger := flag.Duration("linger", 0, "producer linger (franz-go's default is 10ms)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the generator here")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fail("%v", err)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}

	value := make([]byte, *size)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	ps := make([]*producer, *n)
	requests := &produceRequests{}
	for i := range ps {
		cl, err := kgo.NewClient(
			kgo.SeedBrokers(*bootstrap),
			kgo.ClientID(fmt.Sprintf("producer-%d", i)),
			kgo.DefaultProduceTopic(*topic),
			kgo.RequiredAcks(kgo.AllISRAcks()), // idempotence is franz-go's default; it needs acks=all
			kgo.ProducerLinger(*linger),
			kgo.ProducerBatchCompression(kgo.NoCompression()), // 100-byte records: nothing to gain
			kgo.RecordRetries(math.MaxInt32),
			kgo.WithHooks(requests),
		)
		if err != nil {
			fail("client %d: %v", i, err)
		}
		ps[i] = &producer{cl: cl}
	}
	// every client's metadata, producer id and connections before the clock starts
	t0 := time.Now()
	var ready sync.WaitGroup
	var readyErr atomic.Value
	for _, p := range ps {
		ready.Add(1)
		go func(p *producer) {
			defer ready.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
			defer cancel()
			if err := p.cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
				readyErr.Store(err.Error())
			}
		}(p)
	}
	ready.Wait()
	if e := readyErr.Load(); e != nil {
		fail("first record: %v", e)
	}
	fmt.Fprintf(os.Stderr, "%d producers ready in %.1f s\n", *n, time.Since(t0).Seconds())

	period := time.Duration(float64(time.Second) / *rate)
	start := time.Now().Add(100 * time.Millisecond)
	winFrom := start.Add(*warmup)
	winTo := winFrom.Add(*measure)
	var scheduled, inWindow, ackedInWindow atomic.Int64
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func(i int, p *producer) {
			defer wg.Done()
			next := start.Add(time.Duration(float64(period) * float64(i) / float64(*n)))
			for next.Before(winTo) {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				at := next
				measured := !at.Before(winFrom)
				scheduled.Add(1)
				if measured {
					inWindow.Add(1)
				}
				p.cl.Produce(context.Background(), &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
					if now := time.Now(); err == nil && !now.Before(winFrom) && now.Before(winTo) {
						ackedInWindow.Add(1) // the throughput: acknowledged within the window
					}
					if !measured {
						return
					}
					if err != nil {
						atomic.AddInt64(&p.errs, 1)
						return
					}
					us := time.Since(at).Microseconds()
					if us > math.MaxInt32 {
						us = math.MaxInt32
					}
					p.mu.Lock()
					p.lats = append(p.lats, int32(us))
					p.mu.Unlock()
				})
				next = next.Add(period)
			}
		}(i, p)
	}
	// closed once both marks are printed
	marked := make(chan struct{})
	go func() { // marks for the driver (the broker's CPU over the window)
		defer close(marked)
		time.Sleep(time.Until(winFrom))
		requests.measuring.Store(true)
		fmt.Fprintln(os.Stderr, "window start: records from now on are measured")
		time.Sleep(time.Until(winTo))
		requests.measuring.Store(false)
		fmt.Fprintln(os.Stderr, "window end: no more records are scheduled")
	}()
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		last := int64(0)
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				s := scheduled.Load()
				fmt.Fprintf(os.Stderr, "%.0f s: %d records sent in the last 5 s\n", time.Since(start).Seconds(), s-last)
				last = s
			}
		}
	}()
	wg.Wait()
	<-marked // the last record is scheduled just before winTo: without this wait the process could end before its window end mark
	ctx, cancel := context.WithTimeout(context.Background(), *drain)
	var flushed sync.WaitGroup
	for _, p := range ps {
		flushed.Add(1)
		go func(p *producer) { defer flushed.Done(); _ = p.cl.Flush(ctx) }(p)
	}
	flushed.Wait()
	cancel()
	close(done)

	var all []int32
	var errs int64
	for _, p := range ps {
		p.mu.Lock()
		all = append(all, p.lats...)
		p.mu.Unlock()
		errs += atomic.LoadInt64(&p.errs)
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	pct := func(q float64) float64 {
		if len(all) == 0 {
			return -1
		}
		k := int(math.Ceil(q*float64(len(all)))) - 1
		if k < 0 {
			k = 0
		}
		return float64(all[k]) / 1000
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	out := map[string]any{
		"producers":              *n,
		"target_rate":            float64(*n) * *rate,
		"measure_s":              measure.Seconds(),
		"scheduled":              inWindow.Load(),
		"acked":                  len(all),
		"failed":                 errs,
		"unacked":                inWindow.Load() - int64(len(all)) - errs,
		"achieved_rate":          math.Round(float64(ackedInWindow.Load())/measure.Seconds()*10) / 10,
		"produce_requests_per_s": math.Round(float64(requests.n.Load()) / measure.Seconds()),
		"p50_ms":                 pct(0.50),
		"p99_ms":                 pct(0.99),
		"p999_ms":                pct(0.999),
		"max_ms":                 pct(1.0),
		"generator_cpu_s":        math.Round(cpu*100) / 100,
	}
	closeAll(ps)
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	pprof.StopCPUProfile()
}

func closeAll(ps []*producer) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func(p *producer) { defer wg.Done(); p.cl.Close() }(p)
	}
	wg.Wait()
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "many_producers: "+format+"\n", args...)
	os.Exit(2)
}
