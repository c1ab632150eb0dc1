package console

import (
	"context"
	"fmt"
	"time"

	"github.com/signedhook/webhook/riverhook"
)

// This file draws a connection's deliveries by outcome over time: bars of
// server-rendered SVG, no script, each bar's numbers in its title and the
// totals in words, the outcomes told apart by pattern as well as colour.

// chart is one chart as the template draws it.
type chart struct {
	ID            string // unique in the page, for its pattern
	Label         string
	Width, Height int
	Bars          []bar
	Total         riverhook.Period
}

type bar struct {
	X, W  int
	Segs  []seg // from the bottom up
	Title string
}

type seg struct {
	Y, H  int
	Class string // seg-delivered, seg-given-up, seg-cancelled
}

const (
	chartWidth  = 480
	chartHeight = 96
)

// charts returns the connection's charts: the last 24 hours by the hour,
// the last 7 days by the day. Both come from one count of the week by the
// hour, so that a page view reads each delivery ended once, not once a
// chart: the day's chart is its last 24 hours, and the week's sums each
// day's hours.
func (c *console) charts(ctx context.Context, conn string) ([]chart, error) {
	const day = 24 * time.Hour
	week := time.Now().Add(-7 * day).Truncate(day).Add(day) // a UTC midnight, 6 days back
	hours, err := riverhook.Outcomes(ctx, c.client, c.db, conn, week, time.Hour)
	if err != nil {
		return nil, err
	}
	return []chart{
		drawChart("day", "Last 24 hours, by the hour", "15:04", time.Hour, hours[max(len(hours)-24, 0):]),
		drawChart("week", "Last 7 days, by the day", "Mon 2 Jan", day, byDay(hours)),
	}, nil
}

// byDay sums hours, the first of which starts a day, 24 at a time.
func byDay(hours []riverhook.Period) []riverhook.Period {
	days := make([]riverhook.Period, 0, (len(hours)+23)/24)
	for i, h := range hours {
		if i%24 == 0 {
			days = append(days, riverhook.Period{Start: h.Start})
		}
		d := &days[len(days)-1]
		d.Delivered += h.Delivered
		d.GivenUp += h.GivenUp
		d.Cancelled += h.Cancelled
	}
	return days
}

// drawChart lays periods out as stacked bars scaled to the tallest.
func drawChart(id, label, format string, step time.Duration, periods []riverhook.Period) chart {
	ch := chart{ID: id, Label: label, Width: chartWidth, Height: chartHeight}
	most := 1
	for _, p := range periods {
		most = max(most, p.Delivered+p.GivenUp+p.Cancelled)
		ch.Total.Delivered += p.Delivered
		ch.Total.GivenUp += p.GivenUp
		ch.Total.Cancelled += p.Cancelled
	}
	slot := chartWidth / max(len(periods), 1)
	for i, p := range periods {
		b := bar{X: i*slot + 1, W: max(slot-2, 1),
			Title: fmt.Sprintf("%s–%s UTC: %d delivered, %d given up, %d cancelled", p.Start.Format(format),
				p.Start.Add(step).Format(format), p.Delivered, p.GivenUp, p.Cancelled)}
		y := chartHeight
		for _, part := range []struct {
			n     int
			class string
		}{{p.Delivered, "seg-delivered"}, {p.GivenUp, "seg-given-up"}, {p.Cancelled, "seg-cancelled"}} {
			if part.n == 0 {
				continue
			}
			h := max(part.n*(chartHeight-4)/most, 1)
			y -= h
			b.Segs = append(b.Segs, seg{Y: y, H: h, Class: part.class})
		}
		ch.Bars = append(ch.Bars, b)
	}
	return ch
}
