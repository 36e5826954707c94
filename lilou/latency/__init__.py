"""latency"""
