"""The full-screen terminal renderer: its state, panes, keys and the renderer itself."""
