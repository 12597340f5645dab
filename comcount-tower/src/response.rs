//! What a refused request gets: a [`Rejection`] to build the response from, and the default
//! response, `429 Too Many Requests`.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use http::{HeaderValue, Response, StatusCode, header};

use crate::decision::retry_after_secs;

/// Why a request was refused, handed to the response hook
/// ([`RateLimitLayer::on_reject`](crate::RateLimitLayer::on_reject)).
///
/// It is also an [`Error`], with a message that says which limit was passed, for a hook that
/// reports it or puts it in a response of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection<'a> {
    pub(crate) key: &'a str,
    pub(crate) counted: u64,
    pub(crate) limit: u64,
    pub(crate) retry_after: Option<Duration>,
}

impl<'a> Rejection<'a> {
    /// The key the request was counted under.
    pub fn key(&self) -> &'a str {
        self.key
    }

    /// What the group counted for the key, with this request: more than [`limit`](Self::limit).
    pub fn counted(&self) -> u64 {
        self.counted
    }

    /// The key's limit per interval.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// How long until the store's current interval ends, by the store's clock, when the
    /// family knows it (see `Family::until_interval_end`); `None` before its first reply.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// [`retry_after`](Self::retry_after) as the `Retry-After` header holds it: whole
    /// seconds, rounded up, at least 1.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(retry_after_secs)
    }
}

impl fmt::Display for Rejection<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rate limit of {} passed: {} counted for the key",
            self.limit, self.counted
        )
    }
}

impl Error for Rejection<'_> {}

/// Builds the response to a refused request.
///
/// Implemented by [`TooManyRequests`], the default, and by every
/// `Fn(&Rejection<'_>) -> Response`.
pub trait OnReject<Res> {
    /// The response to the request `rejection` describes; the inner service never sees it.
    fn respond(&self, rejection: &Rejection<'_>) -> Res;
}

impl<F, Res> OnReject<Res> for F
where
    F: Fn(&Rejection<'_>) -> Res,
{
    fn respond(&self, rejection: &Rejection<'_>) -> Res {
        self(rejection)
    }
}

/// The default response to a refused request: `429 Too Many Requests`, an empty body, and
/// `Retry-After` in seconds when the family knows the store's interval (see
/// [`Rejection::retry_after`]). For any `http::Response<B>` whose body `B` has a `Default`
/// (an empty body): axum's `Body`, `http_body_util::Empty`, `String`, ...
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TooManyRequests;

impl TooManyRequests {
    /// The response for `rejection`.
    pub fn response<B: Default>(rejection: &Rejection<'_>) -> Response<B> {
        let mut response = Response::new(B::default());
        *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        if let Some(secs) = rejection.retry_after_secs() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

impl<B: Default> OnReject<Response<B>> for TooManyRequests {
    fn respond(&self, rejection: &Rejection<'_>) -> Response<B> {
        Self::response(rejection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejection(retry_after: Option<Duration>) -> Rejection<'static> {
        Rejection {
            key: "acme",
            counted: 11,
            limit: 10,
            retry_after,
        }
    }

    #[test]
    fn the_default_response_is_429_with_retry_after_in_whole_seconds() {
        let response: Response<String> =
            TooManyRequests.respond(&rejection(Some(Duration::from_millis(1200))));
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        assert_eq!(response.body(), "");
    }

    #[test]
    fn no_retry_after_while_the_store_clock_is_unknown() {
        let response: Response<()> = TooManyRequests.respond(&rejection(None));
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(response.headers().get(header::RETRY_AFTER).is_none());
    }

    #[test]
    fn a_rejection_reads_as_an_error() {
        let r = rejection(None);
        assert_eq!(
            r.to_string(),
            "rate limit of 10 passed: 11 counted for the key"
        );
        let _: &dyn Error = &r;
    }
}
