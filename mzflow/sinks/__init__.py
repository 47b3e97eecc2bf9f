"""sinks/"""
