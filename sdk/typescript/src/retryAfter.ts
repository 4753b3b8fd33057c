/**
 * The one `Retry-After` parser: delay-seconds or an HTTP date, as seconds to wait (as the Python SDK's
 * `retry_after_seconds`). The api sends whole seconds on every 429 and 503; upstreams and proxies may send
 * an HTTP date (RFC 9110, section 10.2.3).
 */

const DELAY_SECONDS = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/;

/**
 * Seconds to wait from a `Retry-After` value.
 *
 * @param value The header's value: delay-seconds (`"2"`, also `"1.5"`) or an HTTP date
 *   (`"Wed, 21 Oct 2026 07:28:00 GMT"`).
 * @param now The current time in milliseconds since the epoch, for an HTTP date (default: the clock).
 * @returns The delay in seconds, never negative (a date in the past is 0), or null when the value is
 *   absent, empty or neither a finite number nor a date.
 */
export function retryAfterSeconds(value: string | null | undefined, now: number = Date.now()): number | null {
  const text = value?.trim();
  if (!text) return null;
  if (DELAY_SECONDS.test(text)) {
    const seconds = Number(text);
    return Number.isFinite(seconds) ? Math.max(seconds, 0) : null;
  }
  const when = Date.parse(text);
  return Number.isNaN(when) ? null : Math.max((when - now) / 1000, 0);
}
