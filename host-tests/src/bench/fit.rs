//! Least-squares straight lines: the batching split (CPU per request =
//! per decision + per call ÷ decisions per call) and memory per stream (the
//! slope of a reading against the streams held).

/// `y = a + b·x` fitted to points, with how far the points lie from it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Line {
    /// Intercept: y at x = 0.
    pub a: f64,
    /// Slope.
    pub b: f64,
    /// Root mean square of the residuals (0 for two points).
    pub rms: f64,
}

impl Line {
    /// The least-squares line through `points` (x, y); `None` with fewer
    /// than two points or when every x is the same (no slope to find).
    pub fn fit(points: &[(f64, f64)]) -> Option<Line> {
        let n = points.len() as f64;
        if points.len() < 2 {
            return None;
        }
        let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        // x spread below 1e-12 of its scale: the points are one x.
        if sxx.is_nan() || sxx <= 1e-12 * (1.0 + mx * mx) {
            return None;
        }
        let b = sxy / sxx;
        let a = my - b * mx;
        let rms = (points.iter().map(|p| (p.1 - a - b * p.0).powi(2)).sum::<f64>() / n).sqrt();
        Some(Line { a, b, rms })
    }

    /// y at `x`.
    pub fn at(&self, x: f64) -> f64 {
        self.a + self.b * x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_on_a_line_give_it_back_with_no_residual() {
        let l = Line::fit(&[(0.0, 3.0), (0.5, 4.0), (1.0, 5.0)]).unwrap();
        assert!((l.a - 3.0).abs() < 1e-12 && (l.b - 2.0).abs() < 1e-12 && l.rms < 1e-12, "{l:?}");
        assert!((l.at(0.25) - 3.5).abs() < 1e-12);
    }

    #[test]
    fn scattered_points_report_their_residual() {
        // y = 1 + x, the middle point 0.3 above: fit a=1.1, b=1, residuals -0.1, 0.2, -0.1.
        let l = Line::fit(&[(0.0, 1.0), (1.0, 2.3), (2.0, 3.0)]).unwrap();
        assert!((l.a - 1.1).abs() < 1e-9 && (l.b - 1.0).abs() < 1e-9, "{l:?}");
        assert!((l.rms - (0.06f64 / 3.0).sqrt()).abs() < 1e-9, "{l:?}");
    }

    #[test]
    fn no_line_through_one_x() {
        assert_eq!(Line::fit(&[(1.0, 1.0)]), None);
        assert_eq!(Line::fit(&[(1.0, 1.0), (1.0, 2.0)]), None);
        assert!(Line::fit(&[(1.0, 1.0), (2.0, 1.0)]).is_some());
    }
}
