"""Renderers: results of the analyses drawn as text reports and plotly figures; they compute and load nothing."""
